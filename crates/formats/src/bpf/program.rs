//! The two iterator programs of the in-use rule, as BPF instructions
//! (Documentation/bpf/standardization/instruction-set.rst), and the records they write.
//!
//! The kernel runs a `task_file` iterator program once per open file of every process and a
//! `task_vma` one once per memory mapping (Documentation/bpf/bpf_iterators.rst), handing it the
//! task and the file or mapping. The programs here look at the file's inode and write a record
//! only for a block device, or for a regular file whose inode number is one of those asked
//! about (a loop device's backing file): everything else costs the kernel a few loads and
//! nothing reaches user space. The field offsets come from the kernel's own BTF
//! ([`Layout::from_btf`]), so no kernel version's layout is assumed.

use super::btf::{Btf, Field};

/// Where the iterators find what they read, from the running kernel's BTF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `struct bpf_iter_meta.seq`: the output the records are written to.
    pub meta_seq: Field,
    /// `struct task_struct.tgid`: the process ID.
    pub task_tgid: Field,
    /// `struct file.f_inode`.
    pub file_inode: Field,
    /// `struct inode.i_mode`: the file type.
    pub inode_mode: Field,
    /// `struct inode.i_ino`.
    pub inode_ino: Field,
    /// `struct inode.i_rdev`: a device node's device number.
    pub inode_rdev: Field,
    /// `struct inode.i_sb`.
    pub inode_sb: Field,
    /// `struct super_block.s_dev`: the filesystem's device number.
    pub sb_dev: Field,
    /// `struct vm_area_struct.vm_file`.
    pub vma_file: Field,
    /// `struct vm_area_struct.vm_start`.
    pub vma_start: Field,
    /// `struct vm_area_struct.vm_end`.
    pub vma_end: Field,
}

impl Layout {
    /// Every field, looked up by name; the error names the first one missing or of a size the
    /// programs cannot load.
    pub fn from_btf(btf: &Btf<'_>) -> Result<Self, String> {
        let field = |s: &str, f: &str, sizes: &[u32]| match btf.field(s, f) {
            Some(x) if sizes.contains(&x.size) && x.offset <= i16::MAX as u32 => Ok(x),
            Some(x) => Err(format!("{s}.{f} is {} bytes at {}", x.size, x.offset)),
            None => Err(format!("the kernel's BTF has no {s}.{f}")),
        };
        Ok(Layout {
            meta_seq: field("bpf_iter_meta", "seq", &[8])?,
            task_tgid: field("task_struct", "tgid", &[4])?,
            file_inode: field("file", "f_inode", &[8])?,
            inode_mode: field("inode", "i_mode", &[2])?,
            inode_ino: field("inode", "i_ino", &[8])?,
            inode_rdev: field("inode", "i_rdev", &[4])?,
            inode_sb: field("inode", "i_sb", &[8])?,
            sb_dev: field("super_block", "s_dev", &[4])?,
            vma_file: field("vm_area_struct", "vm_file", &[8])?,
            vma_start: field("vm_area_struct", "vm_start", &[8])?,
            vma_end: field("vm_area_struct", "vm_end", &[8])?,
        })
    }
}

/// What a record says was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A descriptor (its number) of a block device (its device number, the kernel's
    /// `MKDEV`: major in the top 12 bits, minor in the low 20).
    FdBlock { fd: u32, rdev: u32 },
    /// A descriptor of a regular file asked about: its inode number and its filesystem's device
    /// number (`s_dev`, the kernel's `MKDEV`).
    FdFile { fd: u32, ino: u64, sb_dev: u32 },
    /// A mapping (its address range) of a block device.
    MapBlock { start: u64, end: u64, rdev: u32 },
    /// A mapping of a regular file asked about.
    MapFile {
        start: u64,
        end: u64,
        ino: u64,
        sb_dev: u32,
    },
}

/// One record: the process (its ID in the initial PID namespace) and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// `tgid` of the process.
    pub pid: u32,
    /// What it holds.
    pub found: Found,
}

/// Bytes per record: pid (4), kind (4), then four 8-byte words.
pub const RECORD_LEN: usize = 40;

const KIND_FD_BLOCK: u32 = 1;
const KIND_FD_FILE: u32 = 2;
const KIND_MAP_BLOCK: u32 = 3;
const KIND_MAP_FILE: u32 = 4;

/// The records in `bytes`, in order; an incomplete record at the end or one of an unknown kind
/// is an error (the programs write whole records of known kinds only, so either means the bytes
/// are not theirs).
pub fn records(bytes: &[u8]) -> Result<Vec<Record>, String> {
    if !bytes.len().is_multiple_of(RECORD_LEN) {
        return Err(format!(
            "{} bytes are not whole {RECORD_LEN}-byte records",
            bytes.len()
        ));
    }
    bytes
        .chunks_exact(RECORD_LEN)
        .map(|r| {
            let w32 = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap_or_default());
            let w64 = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap_or_default());
            let (a, b, c, d) = (w64(8), w64(16), w64(24), w64(32));
            let found = match w32(4) {
                KIND_FD_BLOCK => Found::FdBlock {
                    fd: c as u32,
                    rdev: a as u32,
                },
                KIND_FD_FILE => Found::FdFile {
                    fd: c as u32,
                    ino: a,
                    sb_dev: b as u32,
                },
                KIND_MAP_BLOCK => Found::MapBlock {
                    start: c,
                    end: d,
                    rdev: a as u32,
                },
                KIND_MAP_FILE => Found::MapFile {
                    start: c,
                    end: d,
                    ino: a,
                    sb_dev: b as u32,
                },
                other => return Err(format!("a record of unknown kind {other}")),
            };
            Ok(Record { pid: w32(0), found })
        })
        .collect()
}

/// Which iterator a program is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iterates {
    /// `task_file`: `ctx` is (meta, task, fd, file).
    Files,
    /// `task_vma`: `ctx` is (meta, task, vma).
    Mappings,
}

impl Iterates {
    /// The kernel function the program attaches to (its BTF name).
    pub fn attach_func(self) -> &'static str {
        match self {
            Iterates::Files => "bpf_iter_task_file",
            Iterates::Mappings => "bpf_iter_task_vma",
        }
    }
}

/// The helper called (include/uapi/linux/bpf.h, `enum bpf_func_id`).
const HELPER_SEQ_WRITE: i32 = 127;

const S_IFMT: i32 = 0o170000;
const S_IFBLK: i32 = 0o060000;
const S_IFREG: i32 = 0o100000;

/// The program for `what`, writing a record for every block device and every regular file
/// whose inode number is in `inodes`, of every process but `skip` (the daemon, by its host PID).
/// Each instruction is 8 bytes, in the machine's order.
pub fn program(layout: &Layout, what: Iterates, inodes: &[u64], skip: u32) -> Vec<u64> {
    let mut a = Asm::default();
    let (out, regular, block, emit) = (a.label(), a.label(), a.label(), a.label());
    // r6 = ctx; r8 = task; r7 = the file or the mapping.
    a.mov_reg(6, 1);
    let obj_arg = match what {
        Iterates::Files => 24,
        Iterates::Mappings => 16,
    };
    a.ldx(7, 6, at(obj_arg, 8));
    a.jeq_imm(7, 0, out);
    a.ldx(8, 6, at(8, 8));
    a.jeq_imm(8, 0, out);
    // r9 = the process; the daemon's own is skipped (a constant: no helper call per element).
    a.ldx(9, 8, layout.task_tgid);
    a.jeq_imm(9, skip as i32, out);
    // r2 = the file.
    if what == Iterates::Mappings {
        a.ldx(2, 7, layout.vma_file);
        a.jeq_imm(2, 0, out);
        a.ldx(2, 2, layout.file_inode);
    } else {
        a.ldx(2, 7, layout.file_inode);
    }
    a.jeq_imm(2, 0, out);
    // r3 = its type.
    a.ldx(3, 2, layout.inode_mode);
    a.and_imm(3, S_IFMT);
    a.jeq_imm(3, S_IFBLK, block);
    // The verifier refuses code no path reaches: the regular-file branch exists only when some
    // inode is asked about.
    if !inodes.is_empty() {
        a.jne_imm(3, S_IFREG, out);
        a.ldx(4, 2, layout.inode_ino);
        for ino in inodes {
            a.ld_imm64(5, *ino);
            a.jeq_reg(4, 5, regular);
        }
    }
    a.ja(out);
    if !inodes.is_empty() {
        // A regular file asked about: r4 = inode number, r5 = its filesystem's device number.
        a.bind(regular);
        a.ldx(5, 2, layout.inode_sb);
        a.ldx(5, 5, layout.sb_dev);
        a.st_imm_w(
            -36,
            match what {
                Iterates::Files => KIND_FD_FILE,
                Iterates::Mappings => KIND_MAP_FILE,
            } as i32,
        );
        a.ja(emit);
    }
    // A block device: r4 = its device number.
    a.bind(block);
    a.ldx(4, 2, layout.inode_rdev);
    a.mov_imm(5, 0);
    a.st_imm_w(
        -36,
        match what {
            Iterates::Files => KIND_FD_BLOCK,
            Iterates::Mappings => KIND_MAP_BLOCK,
        } as i32,
    );
    // The record, on the stack at r10-40: pid, kind, a, b, c, d.
    a.bind(emit);
    a.stx(-40, 9, 4);
    a.stx(-32, 4, 8);
    a.stx(-24, 5, 8);
    match what {
        Iterates::Files => {
            a.ldx(1, 6, at(16, 4));
            a.stx(-16, 1, 8);
            a.st_imm_dw(-8, 0);
        }
        Iterates::Mappings => {
            a.ldx(1, 7, layout.vma_start);
            a.stx(-16, 1, 8);
            a.ldx(1, 7, layout.vma_end);
            a.stx(-8, 1, 8);
        }
    }
    // bpf_seq_write(meta->seq, r10 - 40, 40)
    a.ldx(1, 6, at(0, 8));
    a.ldx(1, 1, layout.meta_seq);
    a.mov_reg(2, 10);
    a.add_imm(2, -40);
    a.mov_imm(3, RECORD_LEN as i32);
    a.call(HELPER_SEQ_WRITE);
    a.bind(out);
    a.mov_imm(0, 0);
    a.exit();
    a.finish()
}

/// A context argument or a field at a fixed place.
fn at(offset: u32, size: u32) -> Field {
    Field { offset, size }
}

#[derive(Clone, Copy)]
struct Label(usize);

/// A minimal assembler: instructions with jumps to labels resolved at the end.
#[derive(Default)]
struct Asm {
    insns: Vec<(u8, u8, u8, i16, i32)>,
    labels: Vec<Option<usize>>,
    jumps: Vec<(usize, Label)>,
}

const BPF_LDX_MEM: u8 = 0x61; // | size
const BPF_STX_MEM: u8 = 0x63; // | size
const BPF_ST_MEM: u8 = 0x62; // | size
const SIZE_W: u8 = 0x00;
const SIZE_H: u8 = 0x08;
const SIZE_B: u8 = 0x10;
const SIZE_DW: u8 = 0x18;

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }
    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }
    fn raw(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push((code, dst, src, off, imm));
    }
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.raw(code, dst, src, 0, imm);
    }
    fn size_bits(size: u32) -> u8 {
        match size {
            1 => SIZE_B,
            2 => SIZE_H,
            4 => SIZE_W,
            _ => SIZE_DW,
        }
    }
    fn ldx(&mut self, dst: u8, src: u8, f: Field) {
        self.raw(
            BPF_LDX_MEM | Self::size_bits(f.size),
            dst,
            src,
            f.offset as i16,
            0,
        );
    }
    fn stx(&mut self, off: i16, src: u8, size: u32) {
        self.raw(BPF_STX_MEM | Self::size_bits(size), 10, src, off, 0);
    }
    fn st_imm_w(&mut self, off: i16, imm: i32) {
        self.raw(BPF_ST_MEM | SIZE_W, 10, 0, off, imm);
    }
    fn st_imm_dw(&mut self, off: i16, imm: i32) {
        self.raw(BPF_ST_MEM | SIZE_DW, 10, 0, off, imm);
    }
    fn mov_reg(&mut self, dst: u8, src: u8) {
        self.raw(0xbf, dst, src, 0, 0);
    }
    fn mov_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0xb7, dst, 0, 0, imm);
    }
    fn add_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0x07, dst, 0, 0, imm);
    }
    fn and_imm(&mut self, dst: u8, imm: i32) {
        self.raw(0x57, dst, 0, 0, imm);
    }
    fn ld_imm64(&mut self, dst: u8, v: u64) {
        self.raw(0x18, dst, 0, 0, v as u32 as i32);
        self.raw(0, 0, 0, 0, (v >> 32) as u32 as i32);
    }
    fn jeq_imm(&mut self, dst: u8, imm: i32, to: Label) {
        self.jump(0x15, dst, 0, imm, to);
    }
    fn jne_imm(&mut self, dst: u8, imm: i32, to: Label) {
        self.jump(0x55, dst, 0, imm, to);
    }
    fn jeq_reg(&mut self, dst: u8, src: u8, to: Label) {
        self.jump(0x1d, dst, src, 0, to);
    }
    fn ja(&mut self, to: Label) {
        self.jump(0x05, 0, 0, 0, to);
    }
    fn call(&mut self, helper: i32) {
        self.raw(0x85, 0, 0, 0, helper);
    }
    fn exit(&mut self) {
        self.raw(0x95, 0, 0, 0, 0);
    }
    fn finish(mut self) -> Vec<u64> {
        for (at, to) in std::mem::take(&mut self.jumps) {
            let target = self.labels[to.0].expect("every label jumped to is bound") as i64;
            self.insns[at].3 = (target - at as i64 - 1) as i16;
        }
        self.insns
            .into_iter()
            .map(|(code, dst, src, off, imm)| {
                u64::from(code)
                    | u64::from(dst & 0xf) << 8
                    | u64::from(src & 0xf) << 12
                    | u64::from(off as u16) << 16
                    | u64::from(imm as u32) << 32
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        let f = |offset, size| Field { offset, size };
        Layout {
            meta_seq: f(0, 8),
            task_tgid: f(2000, 4),
            file_inode: f(32, 8),
            inode_mode: f(0, 2),
            inode_ino: f(64, 8),
            inode_rdev: f(76, 4),
            inode_sb: f(40, 8),
            sb_dev: f(16, 4),
            vma_file: f(160, 8),
            vma_start: f(0, 8),
            vma_end: f(8, 8),
        }
    }

    fn decode(i: u64) -> (u8, u8, u8, i16, i32) {
        (
            i as u8,
            (i >> 8) as u8 & 0xf,
            (i >> 12) as u8 & 0xf,
            (i >> 16) as u16 as i16,
            (i >> 32) as u32 as i32,
        )
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_exit() {
        for what in [Iterates::Files, Iterates::Mappings] {
            for inodes in [&[][..], &[12, u64::MAX, 1 << 40][..]] {
                let p = program(&layout(), what, inodes, 4242);
                assert_eq!(decode(*p.last().unwrap()).0, 0x95);
                for (at, i) in p.iter().enumerate() {
                    let (code, ..) = decode(*i);
                    if code & 0x07 == 0x05 && code != 0x85 && code != 0x95 {
                        let to = at as i64 + 1 + i64::from(decode(*i).3);
                        assert!(
                            to > at as i64 && (to as usize) < p.len(),
                            "{what:?} at {at}"
                        );
                    }
                }
                // One 64-bit constant (two slots) and one compare per inode asked about.
                let consts = p.iter().filter(|i| decode(**i).0 == 0x18).count();
                assert_eq!(consts, inodes.len());
                assert!(
                    p.iter().any(|i| decode(*i) == (0x69, 3, 2, 0, 0)),
                    "i_mode is loaded as 2 bytes"
                );
            }
        }
    }

    #[test]
    fn records_round_trip_and_foreign_bytes_are_refused() {
        let mut bytes = Vec::new();
        let mut rec = |pid: u32, kind: u32, w: [u64; 4]| {
            bytes.extend(pid.to_le_bytes());
            bytes.extend(kind.to_le_bytes());
            for x in w {
                bytes.extend(x.to_le_bytes());
            }
        };
        rec(7, KIND_FD_BLOCK, [(7 << 20) | 3, 0, 5, 0]);
        rec(8, KIND_MAP_FILE, [99, (8 << 20) | 1, 0x1000, 0x2000]);
        let got = records(&bytes).unwrap();
        assert_eq!(
            got,
            [
                Record {
                    pid: 7,
                    found: Found::FdBlock {
                        fd: 5,
                        rdev: (7 << 20) | 3
                    }
                },
                Record {
                    pid: 8,
                    found: Found::MapFile {
                        start: 0x1000,
                        end: 0x2000,
                        ino: 99,
                        sb_dev: (8 << 20) | 1
                    }
                }
            ]
        );
        assert!(records(&bytes[..RECORD_LEN + 3]).is_err());
        let mut unknown = bytes.clone();
        unknown[4] = 9;
        assert!(records(&unknown).is_err());
        assert_eq!(records(&[]).unwrap(), []);
    }
}
