//! A program's stack frame: the bytes below r10 its code keeps things in, handed out as named [`Slot`]s
//! by a [`Frame`] so that no two parts of a program (the value code, the hit program's own, the totals)
//! agree on offsets in comments. Each slot is aligned to its size (8 at most, what the verifier wants of
//! a word), slots never overlap, and a frame past the kernel's 512 bytes is an error when the program is
//! assembled ([`super::insn::AsmError::Stack`]), not a verifier refusal at load.

/// The most stack a BPF program has (`MAX_BPF_STACK`).
pub const STACK_MAX: u16 = 512;

/// `len` bytes of the stack, from `off` (negative: below r10) up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    off: i16,
    len: i16,
}

impl Slot {
    /// Its first byte, as an offset from r10.
    pub fn off(self) -> i16 {
        self.off
    }

    /// Byte `at` of the slot, as an offset from r10.
    pub fn at(self, at: i16) -> i16 {
        debug_assert!(
            (0..self.len).contains(&at),
            "byte {at} of a {}-byte slot",
            self.len
        );
        self.off + at
    }

    /// Word `i` (8 bytes each) of the slot, as an offset from r10.
    pub fn word(self, i: i16) -> i16 {
        debug_assert!(
            8 * i + 8 <= self.len,
            "word {i} of a {}-byte slot",
            self.len
        );
        self.off + 8 * i
    }
}

/// Hands out a program's slots, each below the last.
#[derive(Debug, Default, Clone)]
pub struct Frame {
    /// Bytes below r10 in use, alignment included.
    used: u32,
}

impl Frame {
    /// A new slot of `len` bytes (1 to 512), aligned to its size, up to a word.
    pub fn slot(&mut self, len: u16) -> Slot {
        let len = len.max(1);
        let align = u32::from(len.next_power_of_two().min(8));
        self.used = (self.used + u32::from(len)).div_ceil(align) * align;
        // Past the limit the offsets are meaningless; `Asm::finish` refuses the program then.
        let off = i16::try_from(self.used).map_or(i16::MIN, |u| -u);
        Slot {
            off,
            len: len.min(STACK_MAX) as i16,
        }
    }

    /// Bytes in use; more than [`STACK_MAX`] and the program cannot load.
    pub fn used(&self) -> u32 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots go down from r10 without overlapping, each aligned to its size (a word at most).
    #[test]
    fn slots_are_aligned_and_apart() {
        let mut f = Frame::default();
        let a = f.slot(4);
        let b = f.slot(8);
        let c = f.slot(16);
        let d = f.slot(1);
        let e = f.slot(4);
        assert_eq!(
            [a.off(), b.off(), c.off(), d.off(), e.off()],
            [-4, -16, -32, -33, -40]
        );
        assert_eq!(c.word(1), -24);
        assert_eq!(f.used(), 40);
    }

    #[test]
    fn the_frame_knows_the_kernels_limit() {
        let mut f = Frame::default();
        f.slot(512);
        assert_eq!(f.used(), u32::from(STACK_MAX));
        f.slot(1);
        assert!(f.used() > u32::from(STACK_MAX));
    }
}
