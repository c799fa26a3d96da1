//! A clap value parser for a value whose syntax alone decides it (`--dump-on`'s triggers, `--on`'s and
//! `--free`'s sources), parsed as it enters so that the request holds it typed: [`Parsed`] takes the parsing function of the layer that
//! owns the syntax, and its refusal as the whole message.

use std::ffi::OsStr;
use std::fmt;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// A clap value parser from a function of the value's text whose refusal is the whole message: it names
/// the option and quotes the value itself, as planning's errors do (clap's own would wrap it in
/// "invalid value '...' for '...'").
pub struct Parsed<T, E>(pub fn(&str) -> Result<T, E>);

// A function pointer is copied whatever it returns (a derive would ask it of `T` and `E`).
impl<T, E> Clone for Parsed<T, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, E> Copy for Parsed<T, E> {}

impl<T: Clone + Send + Sync + 'static, E: fmt::Display + 'static> TypedValueParser
    for Parsed<T, E>
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let text = value
            .to_str()
            .ok_or_else(|| clap::Error::new(ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        (self.0)(text).map_err(|e| cmd.clone().error(ErrorKind::ValueValidation, e))
    }
}
