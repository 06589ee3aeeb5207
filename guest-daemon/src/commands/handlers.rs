//! The command handlers as the dispatch core sees them: one method of the schema's `Handlers` trait per command
//! (declared in `protocol/src/qga/schema/mod.rs`), grouped by family. Each method unpacks the typed arguments and
//! calls its family's module; blocking file-system work goes to the blocking pool.

use guestlink_protocol::qga::schema::*;
use serde_json::{json, Map, Value};

use super::{
    blocking, cpu_mem, disks, exec, file, fsinfo, fstrim, network, osinfo, power, ssh, system,
    users, CommandError, Services, INLINE_READ_MAX,
};
use crate::server::output::Output;

type Answer = Result<Output, CommandError>;

fn empty() -> Answer {
    Ok(Value::Object(Map::new()).into())
}

fn value(v: Value) -> Answer {
    Ok(v.into())
}

impl Outcome for Services {
    type Output = Output;
    type Error = CommandError;
}

impl Handlers for Services {
    // --- system: time, host name, time zone, load, OS, users ---------------------------------------------------

    async fn guest_get_time(&self) -> Answer {
        value(json!(system::get_time()))
    }

    async fn guest_set_time(&self, args: GuestSetTimeArgs) -> Answer {
        let st = system::SetTime {
            hwclock: self.cfg.tools.hwclock.clone(),
        };
        st.run(args.time).await?;
        empty()
    }

    async fn guest_get_host_name(&self) -> Answer {
        value(system::get_host_name())
    }

    async fn guest_get_timezone(&self) -> Answer {
        value(system::get_timezone())
    }

    async fn guest_get_load(&self) -> Answer {
        value(system::get_load(&self.cfg.proc_root)?)
    }

    async fn guest_get_osinfo(&self) -> Answer {
        value(blocking(|| Ok(osinfo::get_osinfo())).await?)
    }

    async fn guest_get_users(&self) -> Answer {
        value(users::get_users(std::path::Path::new("/var/run/utmp"))?)
    }

    // --- power --------------------------------------------------------------------------------------------------

    async fn guest_shutdown(&self, args: GuestShutdownArgs) -> Answer {
        power::shutdown(&self.cfg.tools, args.mode.as_deref()).await?;
        empty()
    }

    async fn guest_suspend_disk(&self) -> Answer {
        power::suspend(&self.cfg.sys_root, power::SuspendMode::Disk).await?;
        empty()
    }

    async fn guest_suspend_ram(&self) -> Answer {
        power::suspend(&self.cfg.sys_root, power::SuspendMode::Ram).await?;
        empty()
    }

    async fn guest_suspend_hybrid(&self) -> Answer {
        power::suspend(&self.cfg.sys_root, power::SuspendMode::Hybrid).await?;
        empty()
    }

    // --- CPUs, memory, statistics -------------------------------------------------------------------------------

    async fn guest_get_vcpus(&self) -> Answer {
        value(cpu_mem::get_vcpus(&self.cfg.sys_root)?)
    }

    async fn guest_set_vcpus(&self, args: GuestSetVcpusArgs) -> Answer {
        let list: Vec<(i64, bool)> = args
            .vcpus
            .iter()
            .map(|v| (v.logical_id, v.online))
            .collect();
        value(json!(cpu_mem::set_vcpus(&self.cfg.sys_root, &list)?))
    }

    async fn guest_get_memory_blocks(&self) -> Answer {
        value(cpu_mem::get_memory_blocks(&self.cfg.sys_root)?)
    }

    async fn guest_set_memory_blocks(&self, args: GuestSetMemoryBlocksArgs) -> Answer {
        let list: Vec<(u64, bool)> = args
            .mem_blks
            .iter()
            .map(|b| (b.phys_index, b.online))
            .collect();
        value(cpu_mem::set_memory_blocks(&self.cfg.sys_root, &list))
    }

    async fn guest_get_memory_block_info(&self) -> Answer {
        value(cpu_mem::get_memory_block_info(&self.cfg.sys_root)?)
    }

    async fn guest_get_cpustats(&self) -> Answer {
        value(cpu_mem::get_cpustats(&self.cfg.proc_root)?)
    }

    async fn guest_get_diskstats(&self) -> Answer {
        value(cpu_mem::get_diskstats(&self.cfg.proc_root)?)
    }

    // --- network ------------------------------------------------------------------------------------------------

    async fn guest_network_get_interfaces(&self) -> Answer {
        value(network::get_interfaces(
            &self.cfg.proc_root,
            &self.cfg.sys_root,
        )?)
    }

    async fn guest_network_get_route(&self) -> Answer {
        value(network::get_routes(&self.cfg.proc_root)?)
    }

    // --- file systems and disks ---------------------------------------------------------------------------------

    async fn guest_get_fsinfo(&self) -> Answer {
        let (proc_root, sys_root) = (self.cfg.proc_root.clone(), self.cfg.sys_root.clone());
        value(blocking(move || fsinfo::get_fsinfo(&proc_root, &sys_root)).await?)
    }

    async fn guest_get_disks(&self) -> Answer {
        let sys_root = self.cfg.sys_root.clone();
        value(blocking(move || disks::get_disks(&sys_root)).await?)
    }

    async fn guest_fstrim(&self, args: GuestFstrimArgs) -> Answer {
        let proc_root = self.cfg.proc_root.clone();
        value(blocking(move || fstrim::fstrim(&proc_root, args.minimum)).await?)
    }

    async fn guest_get_devices(&self) -> Answer {
        Err(CommandError::Unsupported)
    }

    // --- users' passwords and SSH keys --------------------------------------------------------------------------

    async fn guest_set_user_password(&self, args: GuestSetUserPasswordArgs) -> Answer {
        ssh::set_user_password(
            &self.cfg.tools.chpasswd,
            &args.username,
            &args.password,
            args.crypted,
        )
        .await?;
        empty()
    }

    async fn guest_ssh_get_authorized_keys(&self, args: GuestSshGetAuthorizedKeysArgs) -> Answer {
        value(blocking(move || ssh::get_keys(&ssh::lookup(&args.username)?)).await?)
    }

    async fn guest_ssh_add_authorized_keys(&self, args: GuestSshAddAuthorizedKeysArgs) -> Answer {
        blocking(move || {
            // qemu-ga checks the keys before looking the user up.
            ssh::add_keys(
                &ssh::lookup_after_key_check(&args.username, &args.keys)?,
                &args.keys,
                args.reset.unwrap_or(false),
            )
        })
        .await?;
        empty()
    }

    async fn guest_ssh_remove_authorized_keys(
        &self,
        args: GuestSshRemoveAuthorizedKeysArgs,
    ) -> Answer {
        blocking(move || {
            ssh::remove_keys(
                &ssh::lookup_after_key_check(&args.username, &args.keys)?,
                &args.keys,
            )
        })
        .await?;
        empty()
    }

    // --- files --------------------------------------------------------------------------------------------------

    async fn guest_file_open(&self, args: GuestFileOpenArgs) -> Answer {
        let files = self.files.clone();
        value(json!(
            blocking(move || files.open(&args.path, args.mode.as_deref())).await?
        ))
    }

    async fn guest_file_close(&self, args: GuestFileHandleArgs) -> Answer {
        self.files.close(args.handle)?;
        empty()
    }

    /// The answer is written in pieces ([`Output::Streamed`]): no 64 MiB JSON string.
    async fn guest_file_read(&self, args: GuestFileReadArgs) -> Answer {
        // Small reads (the 4 KiB default) are cheaper inline than a hop to the blocking pool.
        let r = if args.count.unwrap_or(file::READ_COUNT_DEFAULT) <= INLINE_READ_MAX {
            self.files.read(args.handle, args.count)?
        } else {
            let files = self.files.clone();
            blocking(move || files.read(args.handle, args.count)).await?
        };
        Ok(Output::Streamed(Box::new(r)))
    }

    async fn guest_file_write(&self, args: GuestFileWriteArgs) -> Answer {
        let files = self.files.clone();
        let (count, eof) =
            blocking(move || files.write(args.handle, &args.buf_b64, args.count)).await?;
        value(json!({ "count": count, "eof": eof }))
    }

    async fn guest_file_seek(&self, args: GuestFileSeekArgs) -> Answer {
        let whence = match args.whence {
            GuestFileWhence::Value(v) => v,
            GuestFileWhence::Name(QgaSeek::Set) => 0,
            GuestFileWhence::Name(QgaSeek::Cur) => 1,
            GuestFileWhence::Name(QgaSeek::End) => 2,
        };
        let files = self.files.clone();
        let (position, eof) =
            blocking(move || files.seek(args.handle, args.offset, whence)).await?;
        value(json!({ "position": position, "eof": eof }))
    }

    async fn guest_file_flush(&self, args: GuestFileHandleArgs) -> Answer {
        let files = self.files.clone();
        blocking(move || files.flush(args.handle)).await?;
        empty()
    }

    async fn guestlink_file_rename(&self, args: GuestlinkFileRenameArgs) -> Answer {
        blocking(move || file::rename(&args.from, &args.to)).await?;
        empty()
    }

    async fn guestlink_file_sha256(&self, args: GuestlinkFileSha256Args) -> Answer {
        value(blocking(move || file::sha256(&args.path)).await?)
    }

    // --- processes ----------------------------------------------------------------------------------------------

    async fn guest_exec(&self, args: GuestExecArgs) -> Answer {
        let capture = match args.capture_mode() {
            GuestExecCaptureOutputMode::None => exec::Capture::None,
            GuestExecCaptureOutputMode::Stdout => exec::Capture::Stdout,
            GuestExecCaptureOutputMode::Stderr => exec::Capture::Stderr,
            GuestExecCaptureOutputMode::Separated => exec::Capture::Separated,
            GuestExecCaptureOutputMode::Merged => exec::Capture::Merged,
        };
        let req = exec::ExecRequest {
            path: args.path,
            args: args.arg.unwrap_or_default(),
            env: args.env,
            input_data: args.input_data,
            capture,
        };
        value(json!({ "pid": self.exec.spawn(&req)? }))
    }

    async fn guest_exec_status(&self, args: GuestExecStatusArgs) -> Answer {
        value(self.exec.status(args.pid)?)
    }

    async fn guestlink_exec_read(&self, args: GuestlinkExecReadArgs) -> Answer {
        value(
            self.exec
                .read(args.pid, args.out_offset, args.err_offset, args.wait_ms)
                .await?,
        )
    }
}
