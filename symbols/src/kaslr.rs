//! KASLR: moving link-time addresses (vmlinux, System.map) to where the running kernel put them.
//!
//! The kernel image moves as one block, so one offset — kallsyms `_text` minus the file's `_text` — relocates
//! every image symbol. Per-CPU symbols are offsets into each CPU's area (link address 0 up), not image
//! addresses, so anything below the image's `_text` stays as it is. Finding the offset and checking that a
//! file is the running kernel read symbol tables, so they are [`crate::relocate`]'s.

/// The names that mark the start of the kernel image, tried in order; both sides must use the same one.
pub const TEXT_MARKERS: [&str; 2] = ["_text", "_stext"];

/// The pure arithmetic: how far the running kernel moved from its link address (may be negative).
pub fn offset(runtime_text: u64, link_text: u64) -> i64 {
    runtime_text.wrapping_sub(link_text) as i64
}

/// One kernel's relocation: its image start at link time and at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kaslr {
    pub link_text: u64,
    pub runtime_text: u64,
}

impl Kaslr {
    pub fn offset(&self) -> i64 {
        offset(self.runtime_text, self.link_text)
    }

    /// Link-time address to runtime address; addresses below the image (per-CPU offsets) do not move.
    pub fn to_runtime(&self, link: u64) -> u64 {
        if link >= self.link_text {
            link.wrapping_add(self.offset() as u64)
        } else {
            link
        }
    }

    /// The inverse of [`Kaslr::to_runtime`].
    pub fn to_link(&self, runtime: u64) -> u64 {
        if runtime >= self.runtime_text {
            runtime.wrapping_sub(self.offset() as u64)
        } else {
            runtime
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_both_directions() {
        assert_eq!(offset(0xffffffff9a000000, 0xffffffff81000000), 0x19000000);
        assert_eq!(offset(0xffffffff81000000, 0xffffffff9a000000), -0x19000000);
        let k = Kaslr {
            link_text: 0xffffffff81000000,
            runtime_text: 0xffffffff9a000000,
        };
        assert_eq!(k.to_runtime(0xffffffff82a05000), 0xffffffff9ba05000);
        assert_eq!(k.to_link(0xffffffff9ba05000), 0xffffffff82a05000);
        // Per-CPU offsets are not image addresses.
        assert_eq!(k.to_runtime(0x1a000), 0x1a000);
        assert_eq!(k.to_link(0x1a000), 0x1a000);
        let none = Kaslr {
            link_text: 0xffffffff81000000,
            runtime_text: 0xffffffff81000000,
        };
        assert_eq!(none.to_runtime(0xffffffff82a05000), 0xffffffff82a05000);
    }
}
