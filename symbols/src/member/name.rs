//! The C spelling of a type, as a reader would write it: `struct new_utsname`, `char[65]`,
//! `const u8 *`, `void (*)()`, whichever [`TypeGraph`] the type comes from.

use super::graph::{Kind, TypeGraph, MAX_NEST};
use super::FieldError;

/// The C spelling of `t`: `struct foo`, `unsigned int`, `char[65]`, `const u8 *`, `pid_t`.
pub(crate) fn type_name<G: TypeGraph + ?Sized>(g: &G, t: G::Type) -> Result<String, FieldError> {
    name_depth(g, t, 0)
}

fn name_depth<G: TypeGraph + ?Sized>(g: &G, t: G::Type, depth: u32) -> Result<String, FieldError> {
    if depth > MAX_NEST {
        return Ok("...".into());
    }
    let named = |kw: &str| -> Result<String, FieldError> {
        Ok(match g.name(t)?.as_ref() {
            "" => format!("{kw}<anonymous>"),
            n => format!("{kw}{n}"),
        })
    };
    let inner = || name_depth(g, g.target(t)?, depth + 1);
    Ok(match g.kind(t)? {
        Kind::Void => "void".into(),
        Kind::Struct => named("struct ")?,
        Kind::Union => named("union ")?,
        Kind::Class => named("class ")?,
        Kind::Enum => named("enum ")?,
        Kind::Typedef | Kind::Named => named("")?,
        Kind::Qualifier(q) => match q.keyword() {
            Some(kw) => qualify(kw, inner()?),
            None => inner()?,
        },
        Kind::Pointer => {
            let target = g.strip(g.target(t)?)?;
            if g.kind(target)? == Kind::Function {
                let ret = name_depth(g, g.target(target)?, depth + 1)?;
                format!("{ret} (*)()")
            } else {
                format!("{} *", inner()?)
            }
        }
        Kind::Function => format!("{} ()", inner()?),
        Kind::Array => array_name(g, t, depth)?,
    })
}

/// `int m[2][3]` is an array of 2 arrays of 3: the element's name, then every bound, outermost first.
fn array_name<G: TypeGraph + ?Sized>(g: &G, t: G::Type, depth: u32) -> Result<String, FieldError> {
    let mut dims = String::new();
    let mut a = t;
    let mut levels = 0;
    while g.kind(a)? == Kind::Array && levels <= MAX_NEST {
        match g.array_len(a)? {
            Some(n) => dims.push_str(&format!("[{n}]")),
            None => dims.push_str("[]"),
        }
        a = g.target(a)?;
        levels += 1;
    }
    Ok(format!("{}{dims}", name_depth(g, a, depth + 1)?))
}

/// `const int`, but `char * const`: a qualifier of a pointer goes after the star.
fn qualify(q: &str, inner: String) -> String {
    if inner.ends_with('*') {
        format!("{inner} {q}")
    } else {
        format!("{q} {inner}")
    }
}
