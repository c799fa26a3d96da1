//! The symbols crate's one integration-test binary. Shared support (the gcc-built "vmlinux" fixture and
//! the skip helper) is `ksymwatch_symbols::testing`, which the workspace root's tests use too.

mod btf_vmlinux;
mod debuginfod;
mod dwarf_members;
mod process_gcc;
mod user_elf;
mod vmlinux_fixture;
