//! Undoing what the selftest made, whatever happened.

use super::{Selftest, status};
use std::time::Instant;

impl Selftest<'_> {
    /// Undoes what the flow made, whatever happened: the mount, the scratch folder, the
    /// attachment and the file. Each is a step of its own.
    pub(super) async fn clean_up(&mut self) {
        if self.mounted {
            let (v, target) = (self.volume.clone(), self.target());
            let t = Instant::now();
            let r = self
                .c()
                .volume
                .unmount(&v, &target)
                .await
                .map(|()| ((), format!("{v} from {target}")))
                .map_err(|s| status("UnmountVolume", &s));
            self.mounted = r.is_err();
            let _ = self.out.record("clean-up: UnmountVolume", t, r);
        }
        // Never remove a folder something may still be mounted on.
        if self.scratch && !self.mounted {
            let dirs = [self.target(), self.plain(), self.scratch_dir()];
            let t = Instant::now();
            let r = async {
                for d in &dirs {
                    match self.c().fs.rmdir(d, false).await {
                        Ok(()) => {}
                        Err(s) if s.code() == tonic::Code::NotFound => {}
                        Err(s) => return Err(status(&format!("Rmdir {d}"), &s)),
                    }
                }
                Ok(((), format!("removed {}", dirs[2])))
            }
            .await;
            let _ = self.out.record("clean-up: Rmdir", t, r);
        }
        if let Some(h) = self.handle.take() {
            if self.attached {
                let t = Instant::now();
                let r = self
                    .vd
                    .detach(h)
                    .map(|()| ((), "detached".to_string()))
                    .map_err(|e| e.to_string());
                let _ = self.out.record("clean-up: DetachVirtualDisk", t, r);
            }
            // Closing the last handle also detaches a disk attached without a permanent
            // lifetime, should the detach above have failed.
            self.vd.close_vhd(h);
        }
        if self.created {
            let path = self.opts.vhdx_path.clone();
            let t = Instant::now();
            let r = self
                .vd
                .delete_vhd_file(&path)
                .map(|()| ((), format!("deleted {path}")))
                .map_err(|e| format!("{path}: {e}"));
            let _ = self.out.record("clean-up: delete VHDX", t, r);
        }
    }
}
