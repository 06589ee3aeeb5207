//! [`qga_commands!`](crate::qga_commands): one line per QGA command gives its schema entry (name, parameters,
//! return type, flags), its variant of the command enum, its case of the parser, and its method of the handler
//! trait with the dispatch to it. The schema in [`super`] is one invocation; a test can declare a set of its own.
//!
//! The daemon runs a parsed command with [`Run::run`]: commands marked `method in core` (sync, ping, info, fsfreeze)
//! go to the dispatch core's own handlers, every other to the command handlers.

use std::future::Future;

use super::CommandSpec;
use crate::qga::error::QgaError;

/// A set of commands declared with [`qga_commands!`](crate::qga_commands).
pub trait CommandSet: Sized + Send + 'static {
    /// The schema entries, in declaration order (`guest-info` lists them reversed).
    const COMMANDS: &'static [CommandSpec];

    /// Parses `execute` + `arguments` like QEMU's generated marshallers.
    fn parse(execute: &str, arguments: Option<&Map<String, Value>>) -> Result<Self, QgaError>;

    /// The command's wire name.
    fn name(&self) -> &'static str;

    /// The schema entry by name.
    fn find(name: &str) -> Option<&'static CommandSpec> {
        Self::COMMANDS.iter().find(|c| c.name == name)
    }
}

/// What the handlers of a command set return: one output type and one error type for every command.
pub trait Outcome {
    /// A successful command's result.
    type Output: Send;
    /// A failed command's error.
    type Error: Send;
}

/// Runs a parsed command on its handlers: `K` the core's (commands declared `method in core`), `H` the others.
pub trait Run<K: Outcome, H: Outcome<Output = K::Output, Error = K::Error>>: CommandSet {
    /// Calls the command's handler method with its arguments.
    fn run(
        self,
        core: &K,
        handlers: &H,
    ) -> impl Future<Output = Result<K::Output, K::Error>> + Send;
}

/// Declares a QGA command set; see the schema in `protocol/src/qga/schema/mod.rs` and docs/CONTRIBUTING.md.
///
/// ```text
/// qga_commands! {
///     pub enum Command; pub trait CoreHandlers; pub trait Handlers; pub const COMMANDS;
///     GuestPing = "guest-ping" => guest_ping in core -> "{}", since "0.15";
///     GuestFileRead(GuestFileReadArgs) = "guest-file-read" => guest_file_read -> "GuestFileRead", since "0.15";
///     GuestShutdown(GuestShutdownArgs) = "guest-shutdown" => guest_shutdown -> "{}", since "0.15", no_response;
/// }
/// ```
///
/// Flags: `no_response` (nothing is sent on success), `not_on_linux` (listed, always disabled, as qemu-ga does),
/// `delimited` (the reply is preceded by 0xFF). The args type implements
/// [`QapiArgs`](super::QapiArgs) and has a `from_qapi_map` reader (both from `qapi_args!`).
#[macro_export]
macro_rules! qga_commands {
    (
        $vis:vis enum $Enum:ident; $cvis:vis trait $Core:ident; $hvis:vis trait $Handlers:ident;
        $tvis:vis const $TABLE:ident;
        $(
            $var:ident $(($aty:ty))? = $name:literal => $method:ident $(in $core:ident)?
                -> $ret:literal, since $since:literal $(, $flag:ident)* ;
        )*
    ) => {
        /// Every command of the set, in schema order.
        $tvis const $TABLE: &[$crate::qga::schema::CommandSpec] = &[$(
            $crate::qga::schema::CommandSpec {
                name: $name,
                success_response: !$crate::__qga_has_flag!(no_response; $($flag)*),
                delimited: $crate::__qga_has_flag!(delimited; $($flag)*),
                params: $crate::__qga_params_of!($($aty)?),
                returns: $ret,
                since: $since,
                linux: !$crate::__qga_has_flag!(not_on_linux; $($flag)*),
            },
        )*];

        /// One parsed QGA command with typed arguments.
        #[derive(Debug, Clone, PartialEq)]
        $vis enum $Enum {
            $(
                #[doc = concat!("`", $name, "`")]
                $var $(($aty))?,
            )*
        }

        /// The dispatch core's handlers: the commands declared `method in core`.
        $cvis trait $Core: $crate::qga::schema::Outcome + Sync {
            $($crate::__qga_method!($($core)?; $name, $method $(, $aty)?);)*
        }

        /// The command handlers: one method per command not declared `method in core`.
        $hvis trait $Handlers: $crate::qga::schema::Outcome + Sync {
            $($crate::__qga_method!($($core)? !; $name, $method $(, $aty)?);)*
        }

        impl $crate::qga::schema::CommandSet for $Enum {
            const COMMANDS: &'static [$crate::qga::schema::CommandSpec] = $TABLE;

            fn parse(
                execute: &str,
                arguments: Option<&$crate::qga::schema::declare::Map<String, $crate::qga::schema::declare::Value>>,
            ) -> Result<Self, $crate::qga::error::QgaError> {
                let empty = $crate::qga::schema::declare::Map::new();
                let obj = arguments.unwrap_or(&empty);
                let root = $crate::qga::schema::visit::Path::Root;
                match execute {
                    $($name => $crate::__qga_parse_of!($Enum, $var, obj, root $(, $aty)?),)*
                    _ => Err($crate::qga::error::QgaError::not_found(execute)),
                }
            }

            fn name(&self) -> &'static str {
                match self {
                    $($Enum::$var $(($crate::__qga_bind!($aty, _a)))? => $name,)*
                }
            }
        }

        impl $Enum {
            /// The arguments as a JSON object (`None` for commands without arguments), e.g. for a host encoder.
            pub fn arguments(
                &self,
            ) -> Option<$crate::qga::schema::declare::Map<String, $crate::qga::schema::declare::Value>> {
                match self {
                    $($Enum::$var $(($crate::__qga_bind!($aty, a)))? => $crate::__qga_args_of!($($aty, a)?),)*
                }
            }
        }

        impl<K, H> $crate::qga::schema::Run<K, H> for $Enum
        where
            K: $Core,
            H: $Handlers + $crate::qga::schema::Outcome<Output = K::Output, Error = K::Error>,
        {
            async fn run(self, core: &K, handlers: &H) -> Result<K::Output, K::Error> {
                match self {
                    $($Enum::$var $(($crate::__qga_bind!($aty, a)))? =>
                        $crate::__qga_call!($($core)?; core, handlers, $method $(, a, $aty)?).await,)*
                }
            }
        }
    };
}

#[doc(hidden)]
pub use serde_json::{to_value, Map, Value};

/// `true` when the flag is in the list.
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_has_flag {
    ($want:ident;) => { false };
    (no_response; no_response $($rest:ident)*) => { true };
    (not_on_linux; not_on_linux $($rest:ident)*) => { true };
    (delimited; delimited $($rest:ident)*) => { true };
    ($want:ident; $other:ident $($rest:ident)*) => { $crate::__qga_has_flag!($want; $($rest)*) };
}

/// The parameter specs of an args type, or none.
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_params_of {
    () => {
        &[]
    };
    ($aty:ty) => {
        <$aty as $crate::qga::schema::QapiArgs>::PARAMS
    };
}

/// The binding of a variant's argument, in a pattern.
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_bind {
    ($aty:ty, $a:ident) => {
        $a
    };
}

/// A variant's arguments as a JSON object.
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_args_of {
    () => {
        None
    };
    ($aty:ty, $a:ident) => {
        match $crate::qga::schema::declare::to_value($a) {
            Ok($crate::qga::schema::declare::Value::Object(m)) => Some(m),
            _ => Some($crate::qga::schema::declare::Map::new()),
        }
    };
}

/// One command's case of the parser.
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_parse_of {
    ($Enum:ident, $var:ident, $obj:ident, $root:ident) => {{
        $crate::qga::schema::visit::check_struct($obj, &[], &$root)?;
        Ok($Enum::$var)
    }};
    ($Enum:ident, $var:ident, $obj:ident, $root:ident, $aty:ty) => {
        Ok($Enum::$var(<$aty>::from_qapi_map($obj, &$root)?))
    };
}

/// A handler method: in the core's trait with `core;` (a core command) or `;` (not one: nothing), in the handlers'
/// trait with `!;` (not a core command) or `core !;` (a core command: nothing).
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_method {
    (core; $name:literal, $method:ident $(, $aty:ty)?) => {
        #[doc = concat!("`", $name, "`")]
        fn $method(&self $(, args: $aty)?)
            -> impl std::future::Future<Output = Result<Self::Output, Self::Error>> + Send;
    };
    (; $name:literal, $method:ident $(, $aty:ty)?) => {};
    (core !; $name:literal, $method:ident $(, $aty:ty)?) => {};
    (!; $name:literal, $method:ident $(, $aty:ty)?) => {
        #[doc = concat!("`", $name, "`")]
        fn $method(&self $(, args: $aty)?)
            -> impl std::future::Future<Output = Result<Self::Output, Self::Error>> + Send;
    };
}

/// The call of a command's handler method.
#[doc(hidden)]
#[macro_export]
macro_rules! __qga_call {
    (core; $core:ident, $h:ident, $method:ident $(, $a:ident, $aty:ty)?) => { $core.$method($($a)?) };
    (; $core:ident, $h:ident, $method:ident $(, $a:ident, $aty:ty)?) => { $h.$method($($a)?) };
}
