//! Clipboard over data-control: CLIPBOARD and PRIMARY both ways, no keyboard focus needed.
//!
//! Guest → host: every `selection`/`primary_selection` event of our data device names the new owner's offer; its
//! MIME types become a GRAB (or a RELEASE when nothing usable is offered). A host REQUEST is answered by
//! `offer.receive(mime, pipe)` and a reader thread ([`io`]) that collects the data with a size cap and a deadline.
//!
//! Host → guest: a GRAB creates a data source offering the MIME types of the host's types plus [`MARKER`] (so
//! that the selection event for our own source is recognised and not echoed to the host), and sets it. A paste
//! (`send`) asks the host once per type; the answer is cached for the grab and written by writer threads.
//! `cancelled` means a guest application took the selection.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use guestlink_protocol::vdagent::{ClipboardType, Selection};

use super::data_control::{Device, DeviceEvent, Manager, Offer, Source, SourceEvent};
use super::{io, State};
use crate::backend::DesktopEvent;

/// A MIME type only our own sources offer.
pub const MARKER: &str = "application/x-guestlink-session";
/// How long a paste waits for the host's data, and a transfer for its peer.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);

/// MIME types for a vdagent type, best first (the first is what we read when several are offered).
pub fn mimes_for(t: ClipboardType) -> &'static [&'static str] {
    match t {
        ClipboardType::Utf8Text => &[
            "text/plain;charset=utf-8",
            "UTF8_STRING",
            "text/plain",
            "STRING",
            "TEXT",
        ],
        ClipboardType::ImagePng => &["image/png"],
        ClipboardType::ImageBmp => &["image/bmp", "image/x-bmp", "image/x-MS-bmp"],
        ClipboardType::ImageTiff => &["image/tiff"],
        ClipboardType::ImageJpg => &["image/jpeg"],
        _ => &[],
    }
}

/// Types in the order they are announced (images first, then text, like the X11 backend).
const TYPES: [ClipboardType; 5] = [
    ClipboardType::ImagePng,
    ClipboardType::ImageBmp,
    ClipboardType::ImageTiff,
    ClipboardType::ImageJpg,
    ClipboardType::Utf8Text,
];

/// The vdagent type a MIME type stands for.
pub fn type_of(mime: &str) -> Option<ClipboardType> {
    TYPES
        .into_iter()
        .find(|t| mimes_for(*t).iter().any(|m| m.eq_ignore_ascii_case(mime)))
}

/// The vdagent types `mimes` can provide.
pub fn types_of(mimes: &[String]) -> Vec<ClipboardType> {
    TYPES
        .into_iter()
        .filter(|t| best_mime(*t, mimes).is_some())
        .collect()
}

/// The offered MIME type to read `t` as.
pub fn best_mime(t: ClipboardType, mimes: &[String]) -> Option<String> {
    mimes_for(t)
        .iter()
        .find_map(|m| mimes.iter().find(|o| o.eq_ignore_ascii_case(m)).cloned())
}

/// A selection we own for the host.
#[derive(Debug)]
struct HostSource {
    source: Source,
    /// Data the host already sent for this grab.
    cache: Vec<(ClipboardType, Arc<Vec<u8>>)>,
    /// Pastes waiting for the host's data.
    pending: Vec<(ClipboardType, OwnedFd, Instant)>,
}

/// One selection (CLIPBOARD or PRIMARY).
#[derive(Debug, Default)]
struct Sel {
    /// The guest application's offer, with the types announced to the host.
    guest: Option<(Offer, Vec<ClipboardType>)>,
    host: Option<HostSource>,
}

/// The data-control clipboard.
#[derive(Debug)]
pub struct Clipboard {
    manager: Manager,
    device: Device,
    primary: bool,
    sel: [Sel; 2],
}

fn index(s: Selection) -> Option<usize> {
    match s {
        Selection::Clipboard => Some(0),
        Selection::Primary => Some(1),
        _ => None,
    }
}

const SELECTIONS: [Selection; 2] = [Selection::Clipboard, Selection::Primary];

impl Clipboard {
    /// A clipboard on `device`; `primary` when the protocol version has primary selection.
    pub fn new(manager: Manager, device: Device, primary: bool) -> Self {
        Self {
            manager,
            device,
            primary,
            sel: Default::default(),
        }
    }
}

impl State {
    fn clip_index(&self, s: Selection) -> Option<usize> {
        let c = self.clip.as_ref()?;
        index(s).filter(|&i| i == 0 || c.primary)
    }

    pub(super) fn on_device_event(&mut self, ev: DeviceEvent) {
        match ev {
            DeviceEvent::Selection(o) => self.guest_selection(0, o),
            DeviceEvent::Primary(o) => self.guest_selection(1, o),
            DeviceEvent::Finished => {
                self.fatal = Some("the compositor finished the data-control device".into());
            }
        }
    }

    /// A new owner of selection `i` (None: empty).
    fn guest_selection(&mut self, i: usize, offer: Option<Offer>) {
        let events = self.events.clone();
        let Some(c) = self.clip.as_mut() else { return };
        let announced = match c.sel[i].guest.take() {
            Some((old, _)) => {
                old.destroy();
                true
            }
            None => false,
        };
        let mimes = offer.as_ref().map(Offer::mimes).unwrap_or_default();
        if mimes.iter().any(|m| m == MARKER) {
            // Our own source: the host owns it and knows.
            if let Some(o) = offer {
                o.destroy();
            }
            return;
        }
        let types = types_of(&mimes);
        tracing::debug!(selection = i, ?mimes, ?types, "guest selection");
        match offer {
            Some(o) if !types.is_empty() => {
                let _ = events.send(DesktopEvent::ClipboardGrab {
                    selection: SELECTIONS[i],
                    types: types.clone(),
                });
                c.sel[i].guest = Some((o, types));
            }
            other => {
                if let Some(o) = other {
                    o.destroy();
                }
                if announced {
                    let _ = events.send(DesktopEvent::ClipboardRelease {
                        selection: SELECTIONS[i],
                    });
                }
            }
        }
    }

    pub(super) fn on_source_event(
        &mut self,
        id: &wayland_client::backend::ObjectId,
        ev: SourceEvent,
    ) {
        let events = self.events.clone();
        let Some(c) = self.clip.as_mut() else { return };
        let Some(i) =
            (0..2).find(|&i| c.sel[i].host.as_ref().is_some_and(|h| &h.source.id() == id))
        else {
            return; // a source we already replaced: its fd closes here
        };
        match ev {
            SourceEvent::Send(mime, fd) => {
                let Some(h) = c.sel[i].host.as_mut() else {
                    return;
                };
                let Some(t) = type_of(&mime) else {
                    return;
                };
                if let Some((_, data)) = h.cache.iter().find(|(ct, _)| *ct == t) {
                    io::spawn_writer(fd, Arc::clone(data));
                    return;
                }
                let first = !h.pending.iter().any(|(pt, _, _)| *pt == t);
                h.pending.push((t, fd, Instant::now()));
                if first {
                    let _ = events.send(DesktopEvent::ClipboardRequest {
                        selection: SELECTIONS[i],
                        data_type: t,
                    });
                }
            }
            SourceEvent::Cancelled => {
                if let Some(h) = c.sel[i].host.take() {
                    h.source.destroy();
                }
            }
        }
    }

    pub(super) fn host_grab(&mut self, s: Selection, types: Vec<ClipboardType>) {
        let Some(i) = self.clip_index(s) else { return };
        let qh = self.qh.clone();
        let Some(c) = self.clip.as_mut() else { return };
        let mut mimes: Vec<&str> = types.iter().flat_map(|t| mimes_for(*t)).copied().collect();
        if mimes.is_empty() {
            tracing::debug!(?types, "host grab without a type we can offer");
            return;
        }
        mimes.push(MARKER);
        let source = c.manager.create_source(&mimes, &qh);
        c.device.set(i == 1, Some(&source));
        if let Some(old) = c.sel[i].host.replace(HostSource {
            source,
            cache: Vec::new(),
            pending: Vec::new(),
        }) {
            old.source.destroy();
        }
        if let Some((o, _)) = c.sel[i].guest.take() {
            o.destroy();
        }
    }

    pub(super) fn host_request(&mut self, s: Selection, t: ClipboardType) {
        let empty = DesktopEvent::ClipboardData {
            selection: s,
            data_type: ClipboardType::None,
            data: Vec::new(),
        };
        let offer = self
            .clip_index(s)
            .and_then(|i| self.clip.as_ref()?.sel[i].guest.clone());
        let Some((offer, _)) = offer else {
            let _ = self.events.send(empty);
            return;
        };
        let Some(mime) = best_mime(t, &offer.mimes()) else {
            let _ = self.events.send(empty);
            return;
        };
        let (rd, wr) = match nix::unistd::pipe() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("pipe: {e}");
                let _ = self.events.send(empty);
                return;
            }
        };
        offer.receive(&mime, wr.as_fd());
        drop(wr);
        tracing::debug!(%mime, "reading the guest selection");
        io::spawn_reader(rd, self.max_clipboard, self.events.clone(), s, t);
    }

    pub(super) fn host_data(&mut self, s: Selection, t: ClipboardType, data: Vec<u8>) {
        let Some(i) = self.clip_index(s) else { return };
        let Some(h) = self.clip.as_mut().and_then(|c| c.sel[i].host.as_mut()) else {
            return;
        };
        if t == ClipboardType::None {
            h.pending.clear(); // the host has nothing: the pasting clients read EOF
            return;
        }
        let data = Arc::new(data);
        for (_, fd, _) in h.pending.extract_if_compat(|(pt, _, _)| *pt == t) {
            io::spawn_writer(fd, Arc::clone(&data));
        }
        h.cache.retain(|(ct, _)| *ct != t);
        h.cache.push((t, data));
    }

    pub(super) fn host_release(&mut self, s: Selection) {
        let Some(i) = self.clip_index(s) else { return };
        let Some(c) = self.clip.as_mut() else { return };
        if let Some(h) = c.sel[i].host.take() {
            c.device.set(i == 1, None);
            h.source.destroy();
        }
    }

    /// Re-sends GRABs for guest-owned selections (after a reconnect to the daemon).
    pub(super) fn reannounce(&self) {
        let Some(c) = self.clip.as_ref() else { return };
        for (i, sel) in c.sel.iter().enumerate() {
            if let Some((_, types)) = &sel.guest {
                let _ = self.events.send(DesktopEvent::ClipboardGrab {
                    selection: SELECTIONS[i],
                    types: types.clone(),
                });
            }
        }
    }

    /// Closes pastes the host did not answer in time.
    pub(super) fn expire_pastes(&mut self, now: Instant) {
        let Some(c) = self.clip.as_mut() else { return };
        for h in c.sel.iter_mut().filter_map(|s| s.host.as_mut()) {
            h.pending
                .retain(|(_, _, since)| now.duration_since(*since) < TRANSFER_TIMEOUT);
        }
    }
}

/// `Vec::extract_if` is newer than our MSRV.
trait ExtractIfCompat<T> {
    fn extract_if_compat(&mut self, pred: impl Fn(&T) -> bool) -> Vec<T>;
}

impl<T> ExtractIfCompat<T> for Vec<T> {
    fn extract_if_compat(&mut self, pred: impl Fn(&T) -> bool) -> Vec<T> {
        let (out, keep) = std::mem::take(self).into_iter().partition(|x| pred(x));
        *self = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_mapping() {
        let offered: Vec<String> = ["TEXT", "image/png", "text/plain;charset=utf-8", MARKER]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(
            types_of(&offered),
            vec![ClipboardType::ImagePng, ClipboardType::Utf8Text]
        );
        assert_eq!(
            best_mime(ClipboardType::Utf8Text, &offered).as_deref(),
            Some("text/plain;charset=utf-8")
        );
        assert_eq!(type_of("UTF8_STRING"), Some(ClipboardType::Utf8Text));
        assert_eq!(type_of("image/x-MS-bmp"), Some(ClipboardType::ImageBmp));
        assert_eq!(type_of(MARKER), None);
        assert!(mimes_for(ClipboardType::FileList).is_empty());
    }
}
