//! A strict QAPI input visitor over `serde_json::Value`, producing qobject-input-visitor's error texts.
//!
//! serde's own errors don't match what QEMU says, so command arguments are read through [`FromQapi`]: members are
//! visited in schema order (the first missing or mistyped member wins), then any member left over is reported as
//! "Parameter 'X' is unexpected". Nested names are built like QEMU's `full_name()`: `vcpus[0].logical-id`.

use serde_json::{Map, Value};

use crate::qga::error::QgaError;

/// Where a value sits inside the arguments object, for error messages.
#[derive(Debug, Clone, Copy)]
pub enum Path<'a> {
    /// The `arguments` object itself.
    Root,
    /// Member `name` of the struct at the parent path.
    Member(&'a Path<'a>, &'a str),
    /// Element `index` of the list at the parent path.
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    /// The path of member `name` below this one.
    pub fn member(&'a self, name: &'a str) -> Path<'a> {
        Path::Member(self, name)
    }

    /// The path of list element `index` below this one.
    pub fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }

    /// QEMU's `full_name()`: `a.b[2].c`; `null` for the root (QEMU passes a NULL name there).
    pub fn full_name(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        if out.is_empty() {
            out.push_str("null");
        }
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Member(parent, name) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Path::Index(parent, index) => {
                parent.write(out);
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }

    /// The last name component, as QEMU's enum visitor reports it (`null` inside lists).
    pub fn last_name(&self) -> String {
        match self {
            Path::Member(_, name) => (*name).to_owned(),
            _ => "null".to_owned(),
        }
    }
}

/// A type that can be read from a QMP argument value with QEMU's checks and error texts.
pub trait FromQapi: Sized {
    /// Reads `value` found at `path`.
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError>;

    /// Reads a struct member that may be absent; required members fail with "Parameter 'X' is missing".
    fn from_member(value: Option<&Value>, path: &Path<'_>) -> Result<Self, QgaError> {
        match value {
            Some(v) => Self::from_qapi(v, path),
            None => Err(QgaError::param_missing(&path.full_name())),
        }
    }
}

impl<T: FromQapi> FromQapi for Option<T> {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        T::from_qapi(value, path).map(Some)
    }

    fn from_member(value: Option<&Value>, path: &Path<'_>) -> Result<Self, QgaError> {
        match value {
            Some(v) => T::from_qapi(v, path).map(Some),
            None => Ok(None),
        }
    }
}

impl FromQapi for i64 {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        value
            .as_i64()
            .ok_or_else(|| QgaError::param_type(&path.full_name(), "integer"))
    }
}

impl FromQapi for u64 {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        // QEMU accepts negative int64 values for uint64 "for backward compatibility" and wraps them.
        if let Some(u) = value.as_u64() {
            return Ok(u);
        }
        if let Some(i) = value.as_i64() {
            return Ok(i as u64);
        }
        Err(QgaError::param_expects(&path.full_name(), "uint64"))
    }
}

impl FromQapi for f64 {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        value
            .as_f64()
            .ok_or_else(|| QgaError::param_type(&path.full_name(), "number"))
    }
}

impl FromQapi for bool {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        value
            .as_bool()
            .ok_or_else(|| QgaError::param_type(&path.full_name(), "boolean"))
    }
}

impl FromQapi for String {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        value
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| QgaError::param_type(&path.full_name(), "string"))
    }
}

impl<T: FromQapi> FromQapi for Vec<T> {
    fn from_qapi(value: &Value, path: &Path<'_>) -> Result<Self, QgaError> {
        let items = value
            .as_array()
            .ok_or_else(|| QgaError::param_type(&path.full_name(), "array"))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| T::from_qapi(item, &path.index(i)))
            .collect()
    }
}

/// Checks that `value` is an object (QEMU's `visit_start_struct`).
pub fn expect_object<'v>(
    value: &'v Value,
    path: &Path<'_>,
) -> Result<&'v Map<String, Value>, QgaError> {
    value
        .as_object()
        .ok_or_else(|| QgaError::param_type(&path.full_name(), "object"))
}

/// QEMU's `visit_check_struct`: a member not in `known` (the schema members, in visit order) is "unexpected";
/// which one is reported when there are several follows QEMU's GHashTable order ([`super::ghash`]).
pub fn check_struct(
    obj: &Map<String, Value>,
    known: &[&str],
    path: &Path<'_>,
) -> Result<(), QgaError> {
    if obj.keys().all(|k| known.contains(&k.as_str())) {
        return Ok(());
    }
    match super::ghash::first_unexpected(obj, known) {
        Some(extra) => Err(QgaError::param_unexpected(&path.member(extra).full_name())),
        None => Ok(()),
    }
}

/// Reads a QAPI enum value (a string from a fixed list).
pub fn read_enum<T: Copy>(
    value: &Value,
    path: &Path<'_>,
    names: &[(&str, T)],
) -> Result<T, QgaError> {
    let s = value
        .as_str()
        .ok_or_else(|| QgaError::param_type(&path.full_name(), "string"))?;
    names
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| QgaError::param_bad_enum(&path.last_name(), s))
}

/// Implements [`FromQapi`] for a struct whose fields all implement it, visiting members in the listed order.
#[macro_export]
macro_rules! qapi_struct_visit {
    ($ty:ident { $($field:ident : $wire:literal),* $(,)? }) => {
        impl $crate::qga::schema::visit::FromQapi for $ty {
            fn from_qapi(
                value: &serde_json::Value,
                path: &$crate::qga::schema::visit::Path<'_>,
            ) -> Result<Self, $crate::qga::error::QgaError> {
                let obj = $crate::qga::schema::visit::expect_object(value, path)?;
                Self::from_qapi_map(obj, path)
            }
        }
        impl $ty {
            /// Reads this struct from an object with QEMU's member checks (schema order, then leftovers).
            pub fn from_qapi_map(
                obj: &serde_json::Map<String, serde_json::Value>,
                path: &$crate::qga::schema::visit::Path<'_>,
            ) -> Result<Self, $crate::qga::error::QgaError> {
                let out = $ty {
                    $($field: $crate::qga::schema::visit::FromQapi::from_member(
                        obj.get($wire),
                        &path.member($wire),
                    )?,)*
                };
                $crate::qga::schema::visit::check_struct(obj, &[$($wire),*], path)?;
                Ok(out)
            }
        }
    };
}
pub use crate::qapi_struct_visit;

/// A command's argument struct: its reader ([`qapi_struct_visit!`]) and its parameter specs
/// ([`QapiArgs`](super::QapiArgs)) from one list of `field: "wire-name" req|opt "QAPI type"`, in schema order.
#[macro_export]
macro_rules! qapi_args {
    ($ty:ident { $($field:ident : $wire:literal $kind:ident $qty:literal),* $(,)? }) => {
        $crate::qga::schema::visit::qapi_struct_visit!($ty { $($field: $wire),* });
        impl $crate::qga::schema::QapiArgs for $ty {
            const PARAMS: &'static [$crate::qga::schema::ParamSpec] =
                &[$($crate::qga::schema::ParamSpec::$kind($wire, $qty)),*];
        }
    };
}
pub use crate::qapi_args;

/// Implements [`FromQapi`] for a fieldless enum with `#[serde(rename_all = "kebab-case")]`-style wire names.
macro_rules! qapi_enum_visit {
    ($ty:ident { $($variant:ident = $wire:literal),* $(,)? }) => {
        impl $crate::qga::schema::visit::FromQapi for $ty {
            fn from_qapi(
                value: &serde_json::Value,
                path: &$crate::qga::schema::visit::Path<'_>,
            ) -> Result<Self, $crate::qga::error::QgaError> {
                $crate::qga::schema::visit::read_enum(value, path, &[$(($wire, $ty::$variant)),*])
            }
        }
        impl $ty {
            /// The QAPI wire name of this value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $wire,)*
                }
            }
        }
    };
}
pub(crate) use qapi_enum_visit;
