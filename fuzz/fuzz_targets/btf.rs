//! Raw BTF (`--btf FILE`, or a kernel's own) must load or be refused, and lookups on what loaded must
//! answer or refuse, never panic or hang. The first byte picks a lookup path, the rest is the blob.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ksymwatch_symbols::{Btf, CastKind, CastType, PathElem};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, blob)) = data.split_first() else {
        return;
    };
    let Ok(btf) = Btf::from_bytes(blob.to_vec(), std::path::Path::new("fuzz"), None) else {
        return;
    };
    let kind = [None, Some(CastKind::Struct), Some(CastKind::Union), Some(CastKind::Enum)];
    for name in ["a", "int", "pair", "task_struct", ""] {
        let cast = CastType {
            kind: kind[usize::from(pick & 3)].clone(),
            name: name.to_string(),
        };
        let path = match pick >> 2 & 3 {
            0 => vec![],
            1 => vec![PathElem::Field("a".into())],
            2 => vec![PathElem::Index(u64::from(pick))],
            _ => vec![PathElem::Field("b".into()), PathElem::Index(1)],
        };
        let _ = btf.member(&cast, &path);
        let _ = btf.variable(name);
        let _ = btf.variable_member(name, &path);
    }
});
