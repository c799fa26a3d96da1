//! `bpf(2)`: loading programs (with the verifier's log on a refusal), creating maps and reading and
//! writing their elements, and attaching a raw-tracepoint program.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `bpf(2)` commands used.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_int = 17;

/// `union bpf_attr` for BPF_PROG_LOAD, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for BPF_MAP_CREATE, up to `map_name`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for the BPF_MAP_*_ELEM commands.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf(cmd, attr, sizeof attr)`; a descriptor-returning command's result is the descriptor.
///
/// # Safety
/// Every pointer inside `attr` must be valid for what `cmd` does with it for the duration of the call.
unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised `union bpf_attr` prefix of exactly `size_of::<T>()` bytes; the
    // pointers it holds are the caller's to vouch for.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

fn object_name(name: &str) -> [u8; 16] {
    // The kernel allows [A-Za-z0-9_.] and a NUL within 16 bytes.
    let mut out = [0u8; 16];
    for (o, c) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = if c.is_ascii_alphanumeric() || c == b'.' {
            c
        } else {
            b'_'
        };
    }
    out
}

/// BPF_PROG_LOAD of `insns` (raw `struct bpf_insn`s) as a program of `prog_type`, licensed GPL (the probe
/// read helpers require it), with close-on-exec (the kernel always sets it). The verifier's log is written
/// into `log` (cleared first) on failure: what it refused, and where.
pub fn bpf_prog_load(
    prog_type: u32,
    insns: &[u64],
    name: &str,
    log: &mut Vec<u8>,
) -> io::Result<OwnedFd> {
    // Without a log first: with one, a log buffer the verifier overflows fails a valid program with
    // ENOSPC (a large --if does). Only a refusal is loaded again, with a log big enough to say why.
    log.clear();
    match prog_load(prog_type, insns, name, 0, log) {
        Err(e)
            if !matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOSYS)
            ) =>
        {
            log.resize(16 << 20, 0);
            let again = prog_load(prog_type, insns, name, 1, log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            log.truncate(end);
            // The first refusal's reason stands; the log explains it.
            again.and(Err(e))
        }
        other => other,
    }
}

fn prog_load(
    prog_type: u32,
    insns: &[u64],
    name: &str,
    log_level: u32,
    log: &mut [u8],
) -> io::Result<OwnedFd> {
    const LICENSE: &[u8] = b"GPL\0";
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level,
        log_size: if log_level == 0 { 0 } else { log.len() as u32 },
        log_buf: if log_level == 0 {
            0
        } else {
            log.as_mut_ptr() as u64
        },
        prog_name: object_name(name),
        ..ProgLoadAttr::default()
    };
    // SAFETY: `insns`, the license and `log` outlive the call; the kernel reads `insn_cnt` instructions
    // and the NUL-terminated license, and writes at most `log_size` bytes of log.
    let fd = unsafe { bpf(BPF_PROG_LOAD, &mut attr) }?;
    // SAFETY: BPF_PROG_LOAD returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_MAP_CREATE.
pub fn bpf_map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    bpf_map_create_flags(map_type, (key_size, value_size, max_entries), 0, name)
}

/// BPF_MAP_CREATE with `map_flags` (`BPF_F_NO_PREALLOC`: a hash map's elements allocated as they are
/// inserted); `sizes`: key, value, max entries.
pub fn bpf_map_create_flags(
    map_type: u32,
    (key_size, value_size, max_entries): (u32, u32, u32),
    map_flags: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags,
        map_name: object_name(name),
        ..MapCreateAttr::default()
    };
    // SAFETY: the attribute holds no pointers.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?;
    // SAFETY: BPF_MAP_CREATE returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_MAP_UPDATE_ELEM (`BPF_ANY`): `key` and `value` must be the map's key and value sizes.
pub fn bpf_map_update(map: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` and `value` are live for the call and as long as the map's sizes (the caller's
    // contract); the kernel only reads them.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(|_| ())
}

/// `union bpf_attr` for BPF_RAW_TRACEPOINT_OPEN.
#[repr(C)]
#[derive(Default)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

/// BPF_RAW_TRACEPOINT_OPEN: attaches `prog` (a raw-tracepoint program) to the kernel tracepoint `name`
/// (`sched_process_fork`) until the returned descriptor is closed.
pub fn bpf_raw_tracepoint_open(name: &str, prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let name =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut attr = RawTracepointAttr {
        name: name.as_ptr() as u64,
        prog_fd: prog.as_raw_fd() as u32,
        ..RawTracepointAttr::default()
    };
    // SAFETY: the NUL-terminated name outlives the call; the kernel only reads it.
    let fd = unsafe { bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }?;
    // SAFETY: BPF_RAW_TRACEPOINT_OPEN returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_MAP_DELETE_ELEM: `key` must be the map's key size. A key that is not there is ENOENT.
pub fn bpf_map_delete(map: BorrowedFd<'_>, key: &[u8]) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` is live for the call and as long as the map's key (the caller's contract); the kernel
    // only reads it.
    unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) }.map(|_| ())
}

/// BPF_MAP_GET_NEXT_KEY: the key after `key` (the first with `None`) into `next`, whose length must be
/// the map's key size; `false` when there is none.
pub fn bpf_map_next_key(
    map: BorrowedFd<'_>,
    key: Option<&[u8]>,
    next: &mut [u8],
) -> io::Result<bool> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: next.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` (when given) and `next` are live for the call and as long as the map's key (the
    // caller's contract); the kernel reads `key` and writes `next`.
    found(unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) })
}

/// BPF_MAP_LOOKUP_ELEM of a map that is not per-CPU: `key`'s value into `value` (the map's key and value
/// sizes); `false` when the key is not there.
pub fn bpf_map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` and `value` are live for the call and as long as the map's sizes (the caller's
    // contract); the kernel reads `key` and writes `value`.
    found(unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) })
}

/// The most CPUs a kernel can be built for (`NR_CPUS` tops out at 8192): a per-CPU lookup's buffer this
/// large always holds every possible CPU's slot.
const NR_CPUS_MAX: usize = 8192;

/// The u32 value at u32 `key` of a map that is not per-CPU (tests read a program's flags back).
#[cfg(test)]
pub fn bpf_map_lookup_u32(map: BorrowedFd<'_>, key: u32) -> io::Result<u32> {
    let mut value = [0u8; 4];
    if !bpf_map_lookup(map, &key.to_ne_bytes(), &mut value)? {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    Ok(u32::from_ne_bytes(value))
}

/// BPF_MAP_LOOKUP_ELEM of a `BPF_MAP_TYPE_PERCPU_ARRAY` of u64 values with a u32 key: each possible CPU's
/// value, by CPU number.
pub fn bpf_map_lookup_percpu_u64(map: BorrowedFd<'_>, key: u32) -> io::Result<Vec<u64>> {
    // A u64 value needs no rounding; room for NR_CPUS_MAX of them holds every possible CPU's.
    let bytes = lookup_percpu(map, key, 8 * NR_CPUS_MAX)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// BPF_MAP_LOOKUP_ELEM of a `BPF_MAP_TYPE_PERCPU_ARRAY` with a u32 key and `value_len`-byte values, on a
/// machine of `cpus` possible CPUs: each possible CPU's value, by CPU number.
pub fn bpf_map_lookup_percpu(
    map: BorrowedFd<'_>,
    key: u32,
    value_len: usize,
    cpus: usize,
) -> io::Result<Vec<Vec<u8>>> {
    // The kernel copies each CPU's value rounded up to 8 bytes.
    let stride = value_len.div_ceil(8) * 8;
    let bytes = lookup_percpu(map, key, stride * cpus)?;
    Ok(bytes
        .chunks(stride)
        .map(|c| c[..value_len].to_vec())
        .collect())
}

/// The bytes a per-CPU array's lookup of u32 `key` writes, every possible CPU's value one after the other,
/// into a buffer of `room` bytes, which the caller makes large enough for all of them.
fn lookup_percpu(map: BorrowedFd<'_>, key: u32, room: usize) -> io::Result<Vec<u8>> {
    let key = key.to_ne_bytes();
    let mut values = vec![0u8; room];
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: values.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: the key is the u32 the map was created with; the kernel writes each possible CPU's value
    // (rounded up to 8 bytes) into `values`, which the callers size for every possible CPU, live for the
    // call.
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }?;
    Ok(values)
}

/// Whether a map command found its key: ENOENT is `false`, not an error.
fn found(ret: io::Result<libc::c_long>) -> io::Result<bool> {
    match ret {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}
