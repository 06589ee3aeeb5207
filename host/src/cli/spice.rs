//! The SPICE subcommands of `guestlink` (their clap definitions, flattened into its command enum) and one
//! function each: text output, or one JSON document with `--json`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use clap::{Args, Subcommand, ValueEnum};
use guestlink_host::spice::ops::{self, ServeLimits};
use guestlink_host::spice::SpiceLink;
use guestlink_host::Error;
use guestlink_protocol::vdagent::{Capability, ClipboardType, Selection};
use serde_json::{json, Value};

use super::args::Cli;
use super::progress::send_file_bar;

/// SPICE agent subcommands (need `--spice-socket`).
#[derive(Debug, Subcommand)]
pub enum SpiceCmd {
    /// SPICE: read or set the guest clipboard.
    #[command(subcommand)]
    Clipboard(ClipboardCmd),
    /// SPICE: set the guest's monitor layout, e.g. `1920x1080` or `1024x768+0+0,800x600+1024+0`.
    Resize(ResizeArgs),
    /// SPICE: copy files into the guest session's download directory.
    SendFile(SendFileArgs),
    /// SPICE: the agent's capabilities and whether it answered.
    SpiceState,
    /// SPICE: move the guest's pointer to X,Y on a display (MOUSE_STATE, client mouse mode), optionally click.
    Mouse(MouseArgs),
}

/// `mouse`.
#[derive(Debug, Args)]
pub struct MouseArgs {
    /// X relative to the display's top-left corner.
    pub x: u32,
    /// Y relative to the display's top-left corner.
    pub y: u32,
    /// The SPICE display id the position refers to.
    #[arg(long, default_value_t = 0)]
    pub display: u8,
    /// Also press and release this button at the position.
    #[arg(long, value_enum, value_name = "BUTTON")]
    pub click: Option<ButtonArg>,
}

/// Mouse buttons.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ButtonArg {
    /// Left button.
    Left,
    /// Middle button.
    Middle,
    /// Right button.
    Right,
}

impl ButtonArg {
    /// The button's bit in MOUSE_STATE's mask.
    pub fn mask(self) -> u32 {
        match self {
            ButtonArg::Left => 1 << 1,
            ButtonArg::Middle => 1 << 2,
            ButtonArg::Right => 1 << 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ButtonArg::Left => "left",
            ButtonArg::Middle => "middle",
            ButtonArg::Right => "right",
        }
    }
}

/// `clipboard get|set`.
#[derive(Debug, Subcommand)]
pub enum ClipboardCmd {
    /// Print (or save) the guest's clipboard.
    Get(ClipboardGetArgs),
    /// Offer text or an image file to the guest, serving its paste requests until a limit.
    Set(ClipboardSetArgs),
}

/// Selection names.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SelectionArg {
    /// CLIPBOARD.
    Clipboard,
    /// PRIMARY.
    Primary,
}

impl From<SelectionArg> for Selection {
    fn from(s: SelectionArg) -> Self {
        match s {
            SelectionArg::Clipboard => Selection::Clipboard,
            SelectionArg::Primary => Selection::Primary,
        }
    }
}

/// Clipboard data types.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TypeArg {
    /// UTF-8 text.
    Text,
    /// PNG image.
    Png,
    /// BMP image.
    Bmp,
    /// TIFF image.
    Tiff,
    /// JPEG image.
    Jpg,
}

impl From<TypeArg> for ClipboardType {
    fn from(t: TypeArg) -> Self {
        match t {
            TypeArg::Text => ClipboardType::Utf8Text,
            TypeArg::Png => ClipboardType::ImagePng,
            TypeArg::Bmp => ClipboardType::ImageBmp,
            TypeArg::Tiff => ClipboardType::ImageTiff,
            TypeArg::Jpg => ClipboardType::ImageJpg,
        }
    }
}

/// `clipboard get`.
#[derive(Debug, Args)]
pub struct ClipboardGetArgs {
    /// Which selection.
    #[arg(long, value_enum, default_value = "clipboard")]
    pub selection: SelectionArg,
    /// Requested type.
    #[arg(long = "type", value_enum, default_value = "text")]
    pub kind: TypeArg,
    /// Write the data to FILE instead of stdout (through a temp sibling renamed into place: never a partial FILE).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `clipboard set`.
#[derive(Debug, Args)]
pub struct ClipboardSetArgs {
    /// The text to offer.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub text: Option<String>,
    /// Offer this image file (type from --type, else from the extension).
    #[arg(long, value_name = "IMAGE")]
    pub file: Option<PathBuf>,
    /// Which selection.
    #[arg(long, value_enum, default_value = "clipboard")]
    pub selection: SelectionArg,
    /// Data type (default: text, or from the file's extension).
    #[arg(long = "type", value_enum)]
    pub kind: Option<TypeArg>,
    /// Exit after answering N paste requests (0 = no limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub loops: u32,
    /// Exit after SECS (default: serve until the guest copies something itself).
    #[arg(long, value_name = "SECS")]
    pub serve_timeout: Option<f64>,
}

/// `resize`.
#[derive(Debug, Args)]
pub struct ResizeArgs {
    /// `WxH[+X+Y][,WxH[+X+Y]…]`.
    pub layout: String,
}

/// `send-file`.
#[derive(Debug, Args)]
pub struct SendFileArgs {
    /// Regular files to send (each is read straight into its DATA frames; it must not shrink meanwhile).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Options shared with the rest of the CLI.
struct Common {
    /// `--json`.
    json: bool,
    /// `--quiet`.
    quiet: bool,
    /// Reply timeout (`--agent-timeout`, default 30 s).
    timeout: Duration,
}

fn caps_names(link: &SpiceLink) -> Vec<&'static str> {
    link.agent_caps()
        .map(|c| c.iter().map(Capability::name).collect())
        .unwrap_or_default()
}

fn type_from_ext(path: &Path) -> TypeArg {
    match path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .as_deref()
    {
        Some("png") => TypeArg::Png,
        Some("bmp") => TypeArg::Bmp,
        Some("tif" | "tiff") => TypeArg::Tiff,
        Some("jpg" | "jpeg") => TypeArg::Jpg,
        _ => TypeArg::Text,
    }
}

fn io_err(e: std::io::Error) -> Error {
    Error::Local {
        what: "cannot write",
        path: "stdout".into(),
        source: e,
    }
}

fn emit(out: &mut dyn Write, v: Value) -> Result<(), Error> {
    writeln!(out, "{v}").map_err(io_err)
}

/// Connects to `--spice-socket` (handshake within `--connect-timeout`, default 5 s), runs the SPICE subcommand;
/// returns the exit status.
pub fn run(cli: &Cli, cmd: &SpiceCmd, out: &mut dyn Write) -> Result<i32> {
    let secs =
        |s: f64| Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("invalid timeout {s}"));
    let connect_timeout = secs(cli.connect_timeout)?;
    let c = Common {
        json: cli.json,
        quiet: cli.quiet,
        timeout: secs(cli.agent_timeout.unwrap_or(30.0))?,
    };
    let path = cli.spice_socket.as_deref().ok_or(Error::NoSpicePath)?;
    let mut link = SpiceLink::connect(path, connect_timeout)?;
    let link = &mut link;
    match cmd {
        SpiceCmd::SpiceState => spice_state(&c, link, out)?,
        SpiceCmd::Clipboard(ClipboardCmd::Get(a)) => clipboard_get(&c, link, out, a)?,
        SpiceCmd::Clipboard(ClipboardCmd::Set(a)) => clipboard_set(&c, link, out, a)?,
        SpiceCmd::Resize(a) => resize(&c, link, out, a)?,
        SpiceCmd::Mouse(a) => mouse(&c, link, out, a)?,
        SpiceCmd::SendFile(a) => send_file(&c, link, out, a)?,
    }
    Ok(0)
}

/// `spice-state`: the agent's capabilities.
fn spice_state(c: &Common, link: &mut SpiceLink, out: &mut dyn Write) -> Result<(), Error> {
    let caps = caps_names(link);
    let words = link
        .agent_caps()
        .map(|c| c.words().to_vec())
        .unwrap_or_default();
    if c.json {
        emit(
            out,
            json!({"agent": true, "caps": words, "capabilities": caps,
                   "selection": link.wire().selection, "grab_serial": link.wire().grab_serial}),
        )?;
    } else {
        writeln!(out, "SPICE agent answered on {}", link.path().display()).map_err(io_err)?;
        let hex: Vec<String> = words.iter().map(|w| format!("{w:#010x}")).collect();
        writeln!(out, "capabilities: {} ({})", caps.join(", "), hex.join(" ")).map_err(io_err)?;
    }
    Ok(())
}

/// `clipboard get`: the guest's clipboard on stdout, in a file, or in the JSON document.
fn clipboard_get(
    c: &Common,
    link: &mut SpiceLink,
    out: &mut dyn Write,
    a: &ClipboardGetArgs,
) -> Result<(), Error> {
    let data = ops::clipboard_get(link, a.selection.into(), a.kind.into(), c.timeout)?;
    match &a.output {
        // As a pull: a temp sibling renamed into place, never a partial file under the name.
        Some(p) => guestlink_host::file::write_host_file(p, &data)?,
        None if c.json => {}
        None => out.write_all(&data).map_err(io_err)?,
    }
    if c.json {
        let mut doc = json!({"bytes": data.len(), "type": ops::type_name(a.kind.into())});
        if a.output.is_none() {
            doc["data"] = match String::from_utf8(data) {
                Ok(s) => Value::String(s),
                Err(e) => {
                    doc["encoding"] = "base64".into();
                    Value::String(B64.encode(e.as_bytes()))
                }
            };
        }
        emit(out, doc)?;
    }
    Ok(())
}

/// `clipboard set`: offers text or an image and serves the guest's paste requests until a limit.
fn clipboard_set(
    c: &Common,
    link: &mut SpiceLink,
    out: &mut dyn Write,
    a: &ClipboardSetArgs,
) -> Result<(), Error> {
    let (data, kind) = match (&a.text, &a.file) {
        (Some(t), _) => (t.clone().into_bytes(), a.kind.unwrap_or(TypeArg::Text)),
        (None, Some(f)) => (
            std::fs::read(f).map_err(|e| Error::Local {
                what: "cannot read",
                path: f.clone(),
                source: e,
            })?,
            a.kind.unwrap_or_else(|| type_from_ext(f)),
        ),
        (None, None) => return Err(Error::Usage("give TEXT or --file IMAGE".into())),
    };
    let limits = ServeLimits {
        loops: a.loops,
        timeout: a.serve_timeout.map(Duration::from_secs_f64),
    };
    let r = ops::clipboard_set(link, a.selection.into(), kind.into(), &data, limits)?;
    if c.json {
        emit(
            out,
            json!({"requests": r.requests, "taken_over": r.taken_over, "bytes": data.len()}),
        )?;
    } else if !c.quiet {
        eprintln!(
            "served {} paste request(s){}",
            r.requests,
            if r.taken_over {
                "; the guest copied something else"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// `resize`: a monitor layout the guest must accept.
fn resize(
    c: &Common,
    link: &mut SpiceLink,
    out: &mut dyn Write,
    a: &ResizeArgs,
) -> Result<(), Error> {
    let monitors = ops::parse_monitors(&a.layout)?;
    ops::resize(link, &monitors, c.timeout)?;
    if c.json {
        emit(out, json!({"ok": true, "monitors": monitors.len()}))?;
    } else if !c.quiet {
        writeln!(out, "the guest accepted {}", a.layout).map_err(io_err)?;
    }
    Ok(())
}

/// `mouse`: one pointer position (and a click) in client mouse mode; nothing answers it.
fn mouse(
    c: &Common,
    link: &mut SpiceLink,
    out: &mut dyn Write,
    a: &MouseArgs,
) -> Result<(), Error> {
    let sent = ops::mouse(link, a.x, a.y, a.display, a.click.map(ButtonArg::mask))?;
    let click = a.click.map(ButtonArg::name);
    if c.json {
        emit(
            out,
            json!({"x": a.x, "y": a.y, "display": a.display, "click": click, "messages": sent}),
        )?;
    } else if !c.quiet {
        writeln!(
            out,
            "pointer sent to {},{} on display {}",
            a.x, a.y, a.display
        )
        .map_err(io_err)?;
    }
    Ok(())
}

/// `send-file`: files into the guest session's download directory, one after the other.
fn send_file(
    c: &Common,
    link: &mut SpiceLink,
    out: &mut dyn Write,
    a: &SendFileArgs,
) -> Result<(), Error> {
    let mut results = Vec::new();
    let base = rand::random::<u32>() & 0x7fff_0000;
    for (i, f) in a.files.iter().enumerate() {
        let bar = (!c.quiet && !c.json && std::io::stderr().is_terminal())
            .then(|| send_file_bar(f.display().to_string()));
        let mut progress = |sent, total| {
            if let Some(pb) = &bar {
                pb.set_length(total);
                pb.set_position(sent);
            }
        };
        let id = base + i as u32 + 1;
        let r = ops::send_file(link, f, id, c.timeout, &mut progress);
        if let Some(pb) = bar {
            pb.finish_and_clear();
        }
        let bytes = r?;
        results.push(json!({"file": f.display().to_string(), "bytes": bytes}));
        if !c.json && !c.quiet {
            writeln!(out, "sent {} ({bytes} bytes)", f.display()).map_err(io_err)?;
        }
    }
    if c.json {
        emit(out, json!({"sent": results}))?;
    }
    Ok(())
}
