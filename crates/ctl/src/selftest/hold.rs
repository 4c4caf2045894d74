//! A second process for the selftest: it holds one of the selftest's own scratch objects (its
//! volume open or locked, an entry of its scratch folder open sharing delete, the disk of the
//! selftest's iSCSI login open) while the selftest asks the daemon or Windows about that
//! object, so a node shows what Windows answers when another process uses it (ledger rows 19,
//! 57, 58, 60, 82 and 89).
//!
//! On a node the holder is `csi-proxy-ctl selftest-hold <what> <path>`, a child of the
//! selftest ([`ChildProcess`]): it takes the object the documented way ([`take`]), prints
//! `ready` (or `failed: <why>`) and keeps it until its standard input closes or
//! [`CHILD_LIMIT`] has passed, whichever is first; the selftest closes that input to release
//! it, and a selftest that dies closes it too. Before it closes a device it reads through its
//! handle once more and prints what that read answered, the last line: whether its handle
//! still worked (a forced format dismounts a volume under other processes, row 89). Tests over
//! the simulated Windows give the selftest the simulator's model of another process instead
//! (its handles are not the daemon's), and run [`serve`] itself against the simulator.

use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_host::windows::os::files::{access, utf16};
use csi_proxy_host::windows::os::{Access, Win32, Win32Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the second process holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A volume device (`\\?\Volume{GUID}`) opened for reading, sharing read and write, as a
    /// backup agent reads a volume raw.
    Open(String),
    /// The same open, and `FSCTL_LOCK_VOLUME` through it, as chkdsk or a format holds one.
    Lock(String),
    /// A disk device (`\\.\PhysicalDriveN`) opened for reading, sharing read and write.
    Disk(String),
    /// A file or directory opened for its attributes, sharing read, write and delete, as an
    /// indexer or a virus scanner holds an entry.
    Entry(String),
}

impl Hold {
    /// The child's command-line words: `open|lock|entry <path>`.
    pub fn args(&self) -> [&str; 2] {
        match self {
            Hold::Open(p) => ["open", p],
            Hold::Lock(p) => ["lock", p],
            Hold::Disk(p) => ["disk", p],
            Hold::Entry(p) => ["entry", p],
        }
    }

    /// The inverse of [`args`](Self::args).
    pub fn parse(what: &str, path: &str) -> Option<Hold> {
        let p = path.to_string();
        match what {
            "open" => Some(Hold::Open(p)),
            "lock" => Some(Hold::Lock(p)),
            "disk" => Some(Hold::Disk(p)),
            "entry" => Some(Hold::Entry(p)),
            _ => None,
        }
    }
}

/// How long a child holds at most, whatever the selftest does: the bound on a node.
pub const CHILD_LIMIT: Duration = Duration::from_secs(300);

/// How long the selftest waits for the child's first line, and for it to exit once released.
const CHILD_ANSWER: Duration = Duration::from_secs(30);

/// Takes `what` through `os`: the raw handles, which the caller closes to release it.
pub fn take(os: &dyn Win32, what: &Hold) -> Win32Result<Vec<u64>> {
    match what {
        Hold::Open(v) => Ok(vec![os.open_raw(&device(v), Access::Read)?]),
        Hold::Disk(d) => Ok(vec![os.open_raw(d, Access::Read)?]),
        Hold::Lock(v) => {
            let h = os.open_raw(&device(v), Access::Read)?;
            // FSCTL_LOCK_VOLUME: "A locked volume can be accessed only through handles to the
            // file object (*hDevice) that locks the volume"; the lock lasts until the handle
            // closes.
            match os.device_io_control(h, io::FSCTL_LOCK_VOLUME, &[], 0) {
                Ok(_) => Ok(vec![h]),
                Err(e) => {
                    os.close(h);
                    Err(e)
                }
            }
        }
        Hold::Entry(p) => {
            let share = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;
            Ok(vec![os.open_entry(
                &utf16(p),
                access::READ_ATTRIBUTES,
                share,
                false,
            )?])
        }
    }
}

/// A volume GUID path as the device it names, as the daemon opens it.
fn device(volume: &str) -> String {
    csi_proxy_host::windows::disk::volume_device(volume)
}

/// The child's side: takes `what`, says `ready` or `failed: <why>` on `out`, holds it until
/// `input` ends or `limit` has passed, says what a read through its handle answers then (a
/// device) or `released` (an entry), and closes its handles. True when it held.
pub fn serve(
    os: &dyn Win32,
    what: &Hold,
    input: impl Read + Send + 'static,
    out: &mut dyn Write,
    limit: Duration,
) -> bool {
    let handles = match take(os, what) {
        Ok(h) => h,
        Err(e) => {
            let _ = writeln!(out, "failed: {e}");
            let _ = out.flush();
            return false;
        }
    };
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut { input }, &mut std::io::sink());
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(limit);
    let last = match (what, handles.first()) {
        (Hold::Entry(_), _) | (_, None) => "released".to_string(),
        // ReadFile on a volume or disk handle reads whole sectors: 4096 bytes is a multiple of
        // every sector size.
        (_, Some(&h)) => match os.read_at(h, 0, 4096) {
            Ok(_) => "released: its handle still read".to_string(),
            Err(e) => format!("released: its handle no longer read: {e}"),
        },
    };
    for h in handles {
        os.close(h);
    }
    let _ = writeln!(out, "{last}");
    let _ = out.flush();
    true
}

/// Something a second process holds; [`release`](Holding::release) ends it (dropping does too).
pub trait Holding: Send {
    /// Releases it: the holder's last word (for a device, what a read through its handle
    /// answered just before), or why the release went wrong.
    fn release(self: Box<Self>) -> Result<String, String>;
}

/// Starts a second process that holds something.
pub trait OtherProcess: Send + Sync {
    /// Holds `what` from another process; answers once it does, or why it could not.
    fn hold(&self, what: &Hold) -> Result<Box<dyn Holding>, String>;
}

/// A child process: `program` with `args` and then the [`Hold::args`] words, speaking
/// [`serve`]'s protocol. On a node, this `csi-proxy-ctl` with `selftest-hold`.
pub struct ChildProcess {
    /// The program.
    pub program: std::path::PathBuf,
    /// The words before what to hold.
    pub args: Vec<String>,
}

struct ChildHolding {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    /// The child's lines after `ready`.
    lines: mpsc::Receiver<String>,
}

impl OtherProcess for ChildProcess {
    fn hold(&self, what: &Hold) -> Result<Box<dyn Holding>, String> {
        let shown = format!(
            "{} {} {}",
            self.program.display(),
            self.args.join(" "),
            what.args().join(" ")
        );
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .args(what.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {shown}: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut held = ChildHolding {
            child: Some(child),
            stdin,
            lines,
        };
        let line = match held.lines.recv_timeout(CHILD_ANSWER) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => String::new(),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = held.end();
                return Err(format!("{shown}: no answer within {CHILD_ANSWER:?}"));
            }
        };
        match line.trim_end() {
            "ready" => Ok(Box::new(held)),
            other => {
                let _ = held.end();
                Err(format!(
                    "{shown}: {}",
                    if other.is_empty() {
                        "exited without an answer"
                    } else {
                        other
                    }
                ))
            }
        }
    }
}

impl ChildHolding {
    /// Closes the child's input (its signal to release) and waits for it to exit, killing it
    /// after [`CHILD_ANSWER`]: its last line.
    fn end(&mut self) -> Result<String, String> {
        drop(self.stdin.take());
        let Some(mut child) = self.child.take() else {
            return Ok(String::new());
        };
        let deadline = Instant::now() + CHILD_ANSWER;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => {
                    let last = self.lines.recv_timeout(CHILD_ANSWER).unwrap_or_default();
                    return Ok(last.trim_end().to_string());
                }
                Ok(Some(status)) => return Err(format!("the holder exited with {status}")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "the holder did not exit within {CHILD_ANSWER:?} of its release; killed"
                    ));
                }
                Err(e) => return Err(format!("waiting for the holder: {e}")),
            }
        }
    }
}

impl Holding for ChildHolding {
    fn release(mut self: Box<Self>) -> Result<String, String> {
        self.end()
    }
}

impl Drop for ChildHolding {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_to_hold_round_trips_through_the_command_line() {
        for h in [
            Hold::Open(r"\\?\Volume{1}".into()),
            Hold::Lock(r"\\?\Volume{1}".into()),
            Hold::Disk(r"\\.\PhysicalDrive3".into()),
            Hold::Entry(r"C:\x\y".into()),
        ] {
            let [w, p] = h.args();
            assert_eq!(Hold::parse(w, p), Some(h.clone()));
        }
        assert_eq!(Hold::parse("take", "x"), None);
    }

    #[test]
    fn a_volume_is_opened_as_its_device() {
        assert_eq!(device(r"\\?\Volume{1}\"), r"\\.\Volume{1}");
    }

    #[cfg(unix)]
    fn sh(script: &str) -> ChildProcess {
        ChildProcess {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "sh".into()],
        }
    }

    /// The protocol with a stand-in child: `ready` holds until the input closes; anything
    /// else is the refusal, named.
    #[cfg(unix)]
    #[test]
    fn a_child_holds_until_released_and_a_refusal_is_named() {
        let h = sh("echo ready; cat >/dev/null; echo released; exit 0")
            .hold(&Hold::Entry("x".into()))
            .unwrap();
        assert_eq!(h.release().unwrap(), "released");
        let e = match sh("echo \"failed: Access is denied. ($1 $2)\"; exit 1")
            .hold(&Hold::Lock("v".into()))
        {
            Err(e) => e,
            Ok(_) => panic!("a refusal was taken for a hold"),
        };
        assert!(e.contains("failed: Access is denied. (lock v)"), "{e}");
        let e = match sh("exit 3").hold(&Hold::Open("v".into())) {
            Err(e) => e,
            Ok(_) => panic!("a silent exit was taken for a hold"),
        };
        assert!(e.contains("exited without an answer"), "{e}");
        let h = sh("echo ready; cat >/dev/null; exit 4")
            .hold(&Hold::Open("v".into()))
            .unwrap();
        assert!(h.release().unwrap_err().contains("exited with"));
    }
}
