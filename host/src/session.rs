//! A session with one guest agent: per-command timeouts, reply unwrapping, and capability probing through
//! `guest-info`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Map, Value};
use tracing::{debug, instrument};

use crate::error::{AgentError, Channel, Error, Result};
use crate::target::Target;
use crate::transport::{StreamTransport, Transport, VirshTransport};

/// Per-command timeouts. Defaults follow Proxmox (docs/protocol/qga.md#proxmox).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// Connect + guest-sync-delimited.
    pub sync: Duration,
    /// Any command not listed below.
    pub default: Duration,
    /// guest-fsfreeze-freeze(-list): a killed freeze can leave the guest unfreezable, so wait long.
    pub freeze: Duration,
    /// guest-fsfreeze-thaw (hook scripts, Windows).
    pub thaw: Duration,
    /// guest-fstrim.
    pub fstrim: Duration,
    /// guest-file-read/write of one chunk (large chunks on a loaded guest).
    pub file: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            sync: Duration::from_secs(5),
            default: Duration::from_secs(5),
            freeze: Duration::from_secs(3600),
            thaw: Duration::from_secs(180),
            fstrim: Duration::from_secs(600),
            file: Duration::from_secs(60),
        }
    }
}

impl Timeouts {
    /// The timeout for `command`.
    pub fn for_command(&self, command: &str) -> Duration {
        match command {
            "guest-fsfreeze-freeze" | "guest-fsfreeze-freeze-list" => self.freeze,
            "guest-fsfreeze-thaw" => self.thaw,
            "guest-fstrim" => self.fstrim,
            "guest-file-read" | "guest-file-write" | "guestlink-file-sha256" => self.file,
            _ => self.default,
        }
    }
}

/// One `supported_commands` entry of `guest-info`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct CommandInfo {
    /// Command name.
    pub name: String,
    /// False when blocked or disabled.
    pub enabled: bool,
    /// False for commands that send no reply on success.
    #[serde(rename = "success-response", default = "yes")]
    pub success_response: bool,
}

fn yes() -> bool {
    true
}

/// The `guest-info` reply.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct GuestInfo {
    /// Agent version.
    pub version: String,
    /// Every command the agent knows.
    pub supported_commands: Vec<CommandInfo>,
}

/// A session with one agent.
#[derive(Debug)]
pub struct Session {
    transport: Box<dyn Transport>,
    timeouts: Timeouts,
    per_batch: bool,
    via_libvirt: bool,
    info: Option<GuestInfo>,
}

impl Session {
    /// Open a session to `target`. Direct targets connect and sync right away so that a missing agent is
    /// reported before anything else happens.
    pub fn open(target: &Target, timeouts: Timeouts) -> Result<Self> {
        let mut transport: Box<dyn Transport> = match target {
            Target::Domain { name, uri } => {
                Box::new(VirshTransport::new(name.clone(), uri.clone()))
            }
            Target::Socket(_) | Target::Proxmox(_) => {
                let path = target
                    .path()
                    .ok_or_else(|| Error::BadRequest("target has no path".into()))?;
                Box::new(StreamTransport::new(path, timeouts.sync))
            }
        };
        transport.connect()?;
        Ok(Self::with_transport(
            transport,
            timeouts,
            target.per_batch(),
            target.via_libvirt(),
        ))
    }

    /// A session over any transport (tests use an in-memory one).
    pub fn with_transport(
        transport: Box<dyn Transport>,
        timeouts: Timeouts,
        per_batch: bool,
        via_libvirt: bool,
    ) -> Self {
        Self {
            transport,
            timeouts,
            per_batch,
            via_libvirt,
            info: None,
        }
    }

    /// The timeouts in use.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// True when replies pass through libvirt (10 MiB reply cap).
    pub fn via_libvirt(&self) -> bool {
        self.via_libvirt
    }

    /// End a batch: on per-batch targets (Proxmox) the connection is closed so others can use the socket.
    pub fn end_batch(&mut self) {
        if self.per_batch {
            self.transport.release();
        }
    }

    /// Send a raw request object and return the whole reply object, error replies included.
    pub fn raw(&mut self, request: Map<String, Value>, timeout: Option<Duration>) -> Result<Value> {
        let command = request
            .get("execute")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let timeout = timeout.unwrap_or_else(|| self.timeouts.for_command(&command));
        self.transport.exchange(request, timeout)
    }

    /// Run `command` with the default timeout for it and return its `return` value.
    pub fn call(&mut self, command: &str, arguments: Option<Value>) -> Result<Value> {
        let timeout = self.timeouts.for_command(command);
        self.call_timeout(command, arguments, timeout)
    }

    /// Run `command` with an explicit timeout and return its `return` value.
    #[instrument(level = "debug", skip(self, arguments))]
    pub fn call_timeout(
        &mut self,
        command: &str,
        arguments: Option<Value>,
        timeout: Duration,
    ) -> Result<Value> {
        let mut request = Map::new();
        request.insert("execute".into(), Value::String(command.to_owned()));
        if let Some(args) = arguments {
            request.insert("arguments".into(), args);
        }
        let reply = self.transport.exchange(request, timeout)?;
        unwrap_reply(command, reply)
    }

    /// Run `command` and deserialize its return value.
    pub fn call_as<T: serde::de::DeserializeOwned>(
        &mut self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<T> {
        let value = self.call(command, arguments)?;
        serde_json::from_value(value).map_err(|e| Error::BadReply {
            command: command.to_owned(),
            detail: e.to_string(),
        })
    }

    /// `guest-info`, fetched once per session.
    pub fn info(&mut self) -> Result<&GuestInfo> {
        if self.info.is_none() {
            let info: GuestInfo = self.call_as("guest-info", None)?;
            debug!(version = %info.version, commands = info.supported_commands.len(), "guest-info");
            self.info = Some(info);
        }
        self.info.as_ref().ok_or(Error::Closed(Channel::Qga))
    }

    /// True when `guest-info` lists `command` as enabled.
    pub fn supports(&mut self, command: &str) -> Result<bool> {
        let info = self.info()?;
        Ok(info
            .supported_commands
            .iter()
            .any(|c| c.name == command && c.enabled))
    }

    /// Enabled state of every listed command, by name.
    pub fn command_map(&mut self) -> Result<HashMap<String, bool>> {
        let info = self.info()?;
        Ok(info
            .supported_commands
            .iter()
            .map(|c| (c.name.clone(), c.enabled))
            .collect())
    }
}

/// A stream of requests whose replies are consumed in order, with several requests in flight on transports
/// that allow it (file chunks: the agent works on one chunk while the host encodes or decodes the next).
pub trait Pipeline {
    /// The next request (`command`, `arguments`), or `None` to stop issuing for now. `in_flight` requests are
    /// still awaiting replies; returning `None` with nothing in flight ends the pipeline.
    fn next_request(&mut self, in_flight: usize) -> Result<Option<(&'static str, Value)>>;
    /// The `return` value of the oldest outstanding request.
    fn on_reply(&mut self, command: &'static str, value: Value) -> Result<()>;
}

impl Session {
    /// Run `p` with up to `depth` requests in flight (1 on transports that cannot pipeline).
    pub fn run_pipeline(&mut self, depth: usize, p: &mut dyn Pipeline) -> Result<()> {
        if !self.transport.can_pipeline() || depth <= 1 {
            while let Some((command, args)) = p.next_request(0)? {
                let value = self.call(command, Some(args))?;
                p.on_reply(command, value)?;
            }
            return Ok(());
        }
        let mut in_flight: std::collections::VecDeque<(Value, &'static str)> =
            std::collections::VecDeque::new();
        loop {
            while in_flight.len() < depth {
                let Some((command, args)) = p.next_request(in_flight.len())? else {
                    break;
                };
                let mut request = Map::new();
                request.insert("execute".into(), Value::String(command.to_owned()));
                request.insert("arguments".into(), args);
                let id = self.transport.send(request)?;
                in_flight.push_back((id, command));
            }
            let Some((id, command)) = in_flight.pop_front() else {
                return Ok(());
            };
            let timeout = self.timeouts.for_command(command);
            let reply = self.transport.receive(&id, command, timeout)?;
            p.on_reply(command, unwrap_reply(command, reply)?)?;
        }
    }
}

/// Turn a reply object into its `return` value or an [`Error::Agent`].
pub fn unwrap_reply(command: &str, mut reply: Value) -> Result<Value> {
    if let Some(ret) = reply.get_mut("return") {
        return Ok(ret.take());
    }
    if let Some(err) = reply.get("error") {
        let field = |k: &str| {
            err.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        return Err(Error::Agent {
            command: command.to_owned(),
            source: AgentError {
                class: field("class"),
                desc: field("desc"),
            },
        });
    }
    Err(Error::BadReply {
        command: command.to_owned(),
        detail: format!("neither return nor error: {reply}"),
    })
}
