//! The kernel's own view of which processes hold a block device: BPF iterator programs over
//! every process's open files and memory mappings ([`program`]), placed by the kernel's
//! self-description ([`btf`]). Pure byte work; the Linux host loads and reads them.

pub mod btf;
pub mod program;
