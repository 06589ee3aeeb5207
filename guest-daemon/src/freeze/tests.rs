//! Freeze algorithm tests with the fake ioctls (never the real FIFREEZE).

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicUsize;

use super::ops::fake::{Call, FakeOps};
use super::*;

const MOUNTINFO: &str = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw - proc proc rw
24 22 8:2 / /var rw - xfs /dev/sda2 rw
25 24 8:3 / /var/lib rw - ext4 /dev/sda3 rw
26 22 0:23 / /run rw - tmpfs tmpfs rw
27 22 8:2 / /bind rw - xfs /dev/sda2 rw
";

struct Fixture {
    dir: tempfile::TempDir,
    ops: Arc<FakeOps>,
    changes: Arc<AtomicUsize>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mountinfo"), MOUNTINFO).unwrap();
        let ops = Arc::new(FakeOps::default());
        *ops.marker.lock().unwrap() = Some(dir.path().join(crate::state::ISFROZEN_NAME));
        Fixture {
            dir,
            ops,
            changes: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn hook(&self, body: &str) -> Hook {
        let p = self.dir.path().join("hook");
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"$1\" >> '{}/hook.log'\n{body}\n",
                self.dir.path().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        Hook {
            path: p,
            timeout: Some(Duration::from_secs(60)),
        }
    }

    fn hook_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hook.log")).unwrap_or_default()
    }

    fn freezer(
        &self,
        hook: Option<Hook>,
        failure: HookFailure,
        auto_thaw: Option<Duration>,
    ) -> Arc<Freezer> {
        let changes = Arc::clone(&self.changes);
        Freezer::new(
            self.ops.clone(),
            FreezeConfig {
                mountinfo: self.dir.path().join("mountinfo"),
                hook,
                hook_failure: failure,
                auto_thaw,
            },
            StateDir::new(self.dir.path()),
            Arc::new(move |_| {
                changes.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap()
    }

    fn marker_exists(&self) -> bool {
        self.dir.path().join(crate::state::ISFROZEN_NAME).exists()
    }
}

fn freezes(calls: &[Call]) -> Vec<&str> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Freeze(d, _) => Some(d.as_str()),
            Call::Thaw(_) | Call::Open(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn freezes_in_reverse_order_and_thaws_forward() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    assert_eq!(f.status(), "thawed");
    // /bind is the same fs as /var: the fake says EBUSY like the kernel would for a second FIFREEZE.
    fx.ops.fail_freeze("/var", OpError::Ioctl(Errno::EBUSY));
    let n = f.freeze(None).await.unwrap();
    assert_eq!(n, 3);
    assert_eq!(freezes(&fx.ops.calls()), ["/bind", "/var/lib", "/var", "/"]);
    // The marker existed before the very first FIFREEZE.
    assert!(fx
        .ops
        .calls()
        .iter()
        .all(|c| !matches!(c, Call::Freeze(_, false))));
    assert!(f.is_frozen() && fx.marker_exists());
    assert_eq!(f.status(), "frozen");

    let thawed = f.thaw().await.unwrap();
    assert_eq!(thawed, 3);
    assert!(fx.ops.frozen().is_empty());
    assert!(!f.is_frozen() && !fx.marker_exists());
    let thaw_order: Vec<String> = fx
        .ops
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Thaw(d) => Some(d.clone()),
            Call::Freeze(..) | Call::Open(_) => None,
        })
        .collect();
    // Forward order; each mount is thawed until FITHAW fails (so each appears at least twice when it was frozen).
    assert_eq!(thaw_order.first().map(String::as_str), Some("/"));
    assert_eq!(thaw_order.iter().filter(|d| *d == "/var/lib").count(), 2);
}

#[tokio::test]
async fn eopnotsupp_is_skipped_and_not_counted() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    fx.ops
        .fail_freeze("/var/lib", OpError::Ioctl(Errno::EOPNOTSUPP));
    assert_eq!(f.freeze(None).await.unwrap(), 3);
    assert_eq!(fx.ops.frozen(), ["/", "/bind", "/var"].map(String::from));
}

#[tokio::test]
async fn other_errno_thaws_everything() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    fx.ops.fail_freeze("/var", OpError::Ioctl(Errno::EIO));
    let e = f.freeze(None).await.unwrap_err();
    assert_eq!(e.to_string(), "failed to freeze /var: Input/output error");
    assert!(
        fx.ops.frozen().is_empty(),
        "left frozen: {:?}",
        fx.ops.frozen()
    );
    assert!(!f.is_frozen() && !fx.marker_exists());
    let e = {
        fx.ops.freeze_errors.lock().unwrap().clear();
        fx.ops.fail_freeze("/", OpError::Open(Errno::EACCES));
        f.freeze(None).await.unwrap_err()
    };
    assert_eq!(e.to_string(), "failed to open /: Permission denied");
    assert!(fx.ops.frozen().is_empty());
}

#[tokio::test]
async fn freeze_list_matches_exact_mountpoints() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    let list = vec![
        "/var/lib".to_owned(),
        "/nonexistent".to_owned(),
        "/var/".to_owned(),
        "/".to_owned(),
    ];
    assert_eq!(f.freeze(Some(list)).await.unwrap(), 2);
    assert_eq!(freezes(&fx.ops.calls()), ["/var/lib", "/"]);
    // Nothing matched: 0, and the state goes back to thawed without a thaw call.
    f.thaw().await.unwrap();
    let before = fx.ops.calls().len();
    assert_eq!(f.freeze(Some(vec!["/nope".to_owned()])).await.unwrap(), 0);
    assert_eq!(fx.ops.calls().len(), before);
    assert!(!f.is_frozen() && !fx.marker_exists());
}

#[tokio::test]
async fn restart_while_frozen_starts_frozen_and_can_thaw() {
    let fx = Fixture::new();
    {
        let f = fx.freezer(None, HookFailure::Abort, None);
        f.freeze(None).await.unwrap();
        // The daemon "dies" here, filesystems frozen, marker left behind.
    }
    assert!(fx.marker_exists());
    let f = fx.freezer(None, HookFailure::Abort, None);
    assert!(f.is_frozen());
    assert_eq!(f.status(), "frozen");
    assert_eq!(f.thaw().await.unwrap(), 4);
    assert!(!f.is_frozen() && !fx.marker_exists());
    assert!(fx.ops.frozen().is_empty());
}

#[tokio::test]
async fn hooks_run_around_freeze_and_thaw() {
    let fx = Fixture::new();
    let f = fx.freezer(Some(fx.hook("exit 0")), HookFailure::Abort, None);
    f.freeze(None).await.unwrap();
    f.thaw().await.unwrap();
    assert_eq!(fx.hook_log(), "freeze\nthaw\n");
}

#[tokio::test]
async fn failing_freeze_hook_aborts_with_nothing_frozen() {
    let fx = Fixture::new();
    let f = fx.freezer(
        Some(fx.hook("[ \"$1\" = freeze ] && exit 4; exit 0")),
        HookFailure::Abort,
        None,
    );
    let e = f.freeze(None).await.unwrap_err();
    assert_eq!(e.to_string(), "fsfreeze hook has failed with status 4");
    assert!(fx.ops.calls().is_empty());
    assert!(!f.is_frozen() && !fx.marker_exists());
}

#[tokio::test]
async fn failing_freeze_hook_ignored_on_request() {
    let fx = Fixture::new();
    let f = fx.freezer(
        Some(fx.hook("[ \"$1\" = freeze ] && exit 4; exit 0")),
        HookFailure::Ignore,
        None,
    );
    assert_eq!(f.freeze(None).await.unwrap(), 4);
    assert!(f.is_frozen());
    f.thaw().await.unwrap();
}

#[tokio::test]
async fn hook_timeout_aborts_the_freeze() {
    let fx = Fixture::new();
    let mut hook = fx.hook("[ \"$1\" = freeze ] && sleep 300; exit 0");
    hook.timeout = Some(Duration::from_millis(300));
    let f = fx.freezer(Some(hook), HookFailure::Abort, None);
    let e = f.freeze(None).await.unwrap_err();
    assert!(matches!(e, FreezeError::Hook(HookError::Timeout(_))), "{e}");
    assert!(fx.ops.calls().is_empty());
}

#[tokio::test]
async fn failing_thaw_hook_reports_error_after_thawing() {
    let fx = Fixture::new();
    let f = fx.freezer(
        Some(fx.hook("[ \"$1\" = thaw ] && exit 2; exit 0")),
        HookFailure::Abort,
        None,
    );
    f.freeze(None).await.unwrap();
    let e = f.thaw().await.unwrap_err();
    assert_eq!(e.to_string(), "fsfreeze hook has failed with status 2");
    assert!(!f.is_frozen() && fx.ops.frozen().is_empty());
}

/// Waits (real time: the watchdog is an OS thread) until `cond` holds, at most `limit`.
async fn wait_for(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

#[tokio::test]
async fn auto_thaw_fires_after_the_delay() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, Some(Duration::from_millis(600)));
    f.freeze(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.status(), "frozen");
    assert!(wait_for(Duration::from_secs(5), || !f.is_frozen()).await);
    assert_eq!(f.status(), "thawed");
    assert!(fx.ops.frozen().is_empty() && !fx.marker_exists());
}

#[tokio::test]
async fn auto_thaw_fires_while_the_callers_runtime_is_blocked() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, Some(Duration::from_millis(300)));
    f.freeze(None).await.unwrap();
    // This test's only runtime thread sleeps in a syscall (like a close stuck in SO_LINGER): the watchdog, on its
    // own thread, thaws anyway.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(f.status(), "thawed");
    assert!(fx.ops.frozen().is_empty() && !fx.marker_exists());
}

#[tokio::test]
async fn manual_thaw_cancels_the_watchdog() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, Some(Duration::from_millis(1000)));
    f.freeze(None).await.unwrap();
    f.thaw().await.unwrap();
    // A new freeze restarts the clock: the first timer must not thaw it at t=1000 ms.
    tokio::time::sleep(Duration::from_millis(500)).await;
    f.freeze(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(f.status(), "frozen");
    let thaws = fx
        .ops
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Thaw(_)))
        .count();
    f.thaw().await.unwrap();
    assert!(
        fx.ops
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::Thaw(_)))
            .count()
            > thaws
    );
}

#[tokio::test]
async fn auto_thaw_disabled_with_none() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    f.freeze(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(f.status(), "frozen");
    f.thaw().await.unwrap();
}

fn opens_since(calls: &[Call], from: usize) -> usize {
    calls[from..]
        .iter()
        .filter(|c| matches!(c, Call::Open(_)))
        .count()
}

#[tokio::test]
async fn thaw_at_the_fd_limit_uses_the_descriptors_of_the_freeze() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    assert_eq!(f.freeze(None).await.unwrap(), 4);
    // Out of descriptors: no open() works and /proc/self/mountinfo cannot be read.
    fx.ops.fail_all_opens(Some(Errno::EMFILE));
    std::fs::remove_file(fx.dir.path().join("mountinfo")).unwrap();
    let before = fx.ops.calls().len();
    assert_eq!(f.thaw().await.unwrap(), 4);
    assert!(fx.ops.frozen().is_empty(), "{:?}", fx.ops.frozen());
    assert_eq!(opens_since(&fx.ops.calls(), before), 0);
    assert!(!f.is_frozen() && !fx.marker_exists());
}

#[tokio::test]
async fn thaw_with_mountinfo_readable_but_opens_failing_still_thaws() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    f.freeze(None).await.unwrap();
    fx.ops.fail_all_opens(Some(Errno::EMFILE));
    assert_eq!(f.thaw().await.unwrap(), 4);
    assert!(fx.ops.frozen().is_empty() && !f.is_frozen() && !fx.marker_exists());
}

#[tokio::test]
async fn failed_fithaw_keeps_frozen_and_the_watchdog_retries() {
    let fx = Fixture::new();
    // Even with --auto-thaw off, a thaw that failed is retried.
    let f = fx.freezer(None, HookFailure::Abort, None);
    f.freeze(None).await.unwrap();
    fx.ops.fail_thaw("/var/lib", Some(Errno::EIO));
    let e = f.thaw().await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, FreezeError::Thaw { .. }), "{text}");
    assert!(
        text.contains("/var/lib (FITHAW: Input/output error)"),
        "{text}"
    );
    assert!(text.contains("may still be frozen"), "{text}");
    assert_eq!(f.status(), "frozen");
    assert!(fx.marker_exists());
    assert_eq!(fx.ops.frozen(), ["/var/lib"].map(String::from));
    // The commands stay restricted meanwhile; once FITHAW works, the watchdog's retry thaws.
    fx.ops.fail_thaw("/var/lib", None);
    assert!(wait_for(Duration::from_secs(5), || !f.is_frozen()).await);
    assert!(fx.ops.frozen().is_empty() && !fx.marker_exists());
}

#[tokio::test]
async fn restart_while_frozen_at_the_fd_limit_stays_frozen_then_retries() {
    let fx = Fixture::new();
    {
        let f = fx.freezer(None, HookFailure::Abort, None);
        f.freeze(None).await.unwrap();
    }
    // The new instance holds nothing: the thaw must open the mount points, and cannot.
    fx.ops.fail_all_opens(Some(Errno::EMFILE));
    let f = fx.freezer(None, HookFailure::Abort, None);
    let e = f.thaw().await.unwrap_err();
    assert!(e.to_string().contains("open: Too many open files"), "{e}");
    assert_eq!(f.status(), "frozen");
    assert!(fx.marker_exists() && !fx.ops.frozen().is_empty());
    fx.ops.fail_all_opens(None);
    assert!(wait_for(Duration::from_secs(5), || !f.is_frozen()).await);
    assert!(fx.ops.frozen().is_empty() && !fx.marker_exists());
}

#[tokio::test]
async fn restart_while_frozen_without_mountinfo_stays_frozen() {
    let fx = Fixture::new();
    {
        let f = fx.freezer(None, HookFailure::Abort, None);
        f.freeze(None).await.unwrap();
    }
    let info = fx.dir.path().join("mountinfo");
    std::fs::rename(&info, fx.dir.path().join("mountinfo.away")).unwrap();
    let f = fx.freezer(None, HookFailure::Abort, None);
    let e = f.thaw().await.unwrap_err();
    assert!(matches!(e, FreezeError::Thaw { .. }), "{e}");
    assert!(e.to_string().contains("failed to read"), "{e}");
    assert_eq!(f.status(), "frozen");
    assert!(fx.marker_exists());
    std::fs::rename(fx.dir.path().join("mountinfo.away"), &info).unwrap();
    assert!(wait_for(Duration::from_secs(5), || !f.is_frozen()).await);
    assert!(fx.ops.frozen().is_empty() && !fx.marker_exists());
}

#[tokio::test]
async fn failed_freeze_whose_thaw_fails_stays_frozen() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    // /var/lib freezes, then / fails (reverse order): everything is thawed, but /var/lib refuses.
    fx.ops.fail_freeze("/", OpError::Ioctl(Errno::EIO));
    fx.ops.fail_thaw("/var/lib", Some(Errno::EIO));
    let e = f.freeze(None).await.unwrap_err();
    assert_eq!(e.to_string(), "failed to freeze /: Input/output error");
    assert_eq!(f.status(), "frozen");
    assert!(fx.marker_exists());
    fx.ops.fail_thaw("/var/lib", None);
    assert!(wait_for(Duration::from_secs(5), || !f.is_frozen()).await);
    assert!(fx.ops.frozen().is_empty() && !fx.marker_exists());
}

#[tokio::test]
async fn freeze_at_the_fd_limit_fails_and_thaws_what_it_froze() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    // The first open works (/bind, reverse order), the next one hits EMFILE.
    fx.ops
        .open_errors
        .lock()
        .unwrap()
        .insert("/var/lib".to_owned(), Errno::EMFILE);
    let e = f.freeze(None).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to open /var/lib: Too many open files"
    );
    assert!(fx.ops.frozen().is_empty(), "{:?}", fx.ops.frozen());
    assert!(!f.is_frozen() && !fx.marker_exists());
}

#[tokio::test]
async fn thaw_for_exit_only_when_frozen() {
    let fx = Fixture::new();
    let f = fx.freezer(None, HookFailure::Abort, None);
    f.thaw_for_exit().await;
    assert!(fx.ops.calls().is_empty());
    f.freeze(None).await.unwrap();
    f.thaw_for_exit().await;
    assert!(!f.is_frozen() && fx.ops.frozen().is_empty());
    assert!(fx.changes.load(Ordering::SeqCst) >= 2);
}

#[tokio::test]
async fn sigterm_during_a_freeze_waits_for_it_then_thaws() {
    let fx = Fixture::new();
    // The hook takes a moment; the caller gives up (its future is dropped) while it runs.
    let f = fx.freezer(
        Some(fx.hook("[ \"$1\" = freeze ] && sleep 1; exit 0")),
        HookFailure::Abort,
        None,
    );
    let r = tokio::time::timeout(Duration::from_millis(200), f.freeze(None)).await;
    assert!(r.is_err(), "the caller timed out");
    // The freeze goes on in its own task; the exit path waits for it and thaws everything.
    f.thaw_for_exit().await;
    assert_eq!(freezes(&fx.ops.calls()).len(), 4, "the freeze completed");
    assert!(
        fx.ops.frozen().is_empty(),
        "left frozen: {:?}",
        fx.ops.frozen()
    );
    assert!(!f.is_frozen() && !fx.marker_exists());
}
