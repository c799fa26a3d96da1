//! A clap value parser for a value whose syntax alone decides it (`--dump-on`'s triggers), parsed as it
//! enters so that the request holds it typed: [`Parsed`] takes the parsing function of the layer that
//! owns the syntax, and its refusal as the whole message.

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// A clap value parser from a function of the value's text whose refusal is the whole message: it names
/// the option and quotes the value itself, as planning's errors do (clap's own would wrap it in
/// "invalid value '...' for '...'").
#[derive(Clone, Copy)]
pub struct Parsed<T>(pub fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Parsed<T> {
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
