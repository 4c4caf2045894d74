//! The selftest's own disk: the virtual disk service is there, the VHDX is created and
//! attached, and the daemon lists the disk it became, which must be plainly that VHDX.

use super::record::Stop;
use super::{Selftest, ms, poll, status};
use csi_proxy_client::disk::DiskIds;
use csi_proxy_host::windows::vhd::{CALL_NOT_IMPLEMENTED, disk_number_of};
use std::time::Instant;

impl Selftest<'_> {
    /// `OpenVirtualDisk` of a file that does not exist: any answer but "not implemented" means
    /// the virtual disk service is there.
    pub(super) fn probe_service(&mut self) -> Result<(), Stop> {
        let vd = self.vd;
        let t = Instant::now();
        let probe = format!("{}.probe", self.opts.vhdx_path);
        let r = match vd.open(&probe) {
            Ok(h) => {
                vd.close_vhd(h);
                Ok(((), format!("OpenVirtualDisk opened {probe}")))
            }
            Err(e) if e.code == CALL_NOT_IMPLEMENTED => Err(format!(
                "this Windows has no virtual disk service: OpenVirtualDisk answered {e} \
                 (as Wine's stub virtdisk.dll does); run the selftest on a real Windows node"
            )),
            Err(e) => Ok((
                (),
                format!("present (OpenVirtualDisk of a missing file: {e})"),
            )),
        };
        self.out.record("virtual disk service", t, r)
    }

    pub(super) fn create_and_attach(&mut self) -> Result<(), Stop> {
        let (vd, path) = (self.vd, self.opts.vhdx_path.clone());
        let t = Instant::now();
        let r = vd
            .create(&path, self.opts.size)
            .map(|h| (h, format!("{path}: {} bytes, dynamic VHDX", self.opts.size)))
            .map_err(|e| format!("{path}: {e}"));
        self.handle = Some(self.out.record("CreateVirtualDisk", t, r)?);
        self.created = true;
        let h = self.handle.expect("created");

        let t = Instant::now();
        let r = vd
            .attach(h)
            .map(|()| ((), "attached, no drive letters".to_string()))
            .map_err(|e| format!("{path}: {e}"));
        self.out.record("AttachVirtualDisk", t, r)?;
        self.attached = true;

        self.disk = Some(self.physical_disk("GetVirtualDiskPhysicalPath")?);
        Ok(())
    }

    /// What `CreateVirtualDisk` answers for the three requests it must refuse (ledger row 44):
    /// the selftest's own VHDX path again (the file exists), a path in a folder that does not
    /// exist, and a size not a multiple of 512. A report, never a failed step; a file made by
    /// a request that was not refused is closed and deleted at once.
    pub(super) fn create_refusals(&mut self) -> Result<(), Stop> {
        let vd = self.vd;
        let own = self.opts.vhdx_path.clone();
        let dir = own.rsplit_once('\\').map_or(".", |(d, _)| d).to_string();
        let pid = std::process::id();
        let cases = [
            ("existing file", own.clone(), self.opts.size),
            (
                "missing folder",
                format!(r"{dir}\csi-proxy-selftest-missing-{pid}\x.vhdx"),
                self.opts.size,
            ),
            (
                "size not a multiple of 512",
                format!("{own}.odd-size.vhdx"),
                (1 << 20) + 1,
            ),
        ];
        let t = Instant::now();
        let mut answers = Vec::new();
        for (what, path, size) in cases {
            match vd.create(&path, size) {
                Err(e) => answers.push(format!("{what}: {e}")),
                Ok(h) => {
                    vd.close_vhd(h);
                    // Never the selftest's own file: that case is the existing one, and a
                    // create that succeeded there made nothing new to delete.
                    let deleted = if path == own {
                        "kept (the selftest's own)".to_string()
                    } else {
                        match vd.delete_vhd_file(&path) {
                            Ok(()) => "deleted again".to_string(),
                            Err(e) => format!("NOT deleted: {e}"),
                        }
                    };
                    answers.push(format!("{what}: accepted ({path} {deleted})"));
                }
            }
        }
        let answer = format!("{} (settles ledger row 44)", answers.join("; "));
        self.out
            .record("CreateVirtualDisk refusals", t, Ok(((), answer)))
    }

    /// The disk number the attached VHDX is now (`GetVirtualDiskPhysicalPath`), recorded as
    /// `name`.
    pub(super) fn physical_disk(&mut self, name: &str) -> Result<u32, Stop> {
        let (vd, h) = (self.vd, self.handle.expect("created"));
        let t = Instant::now();
        let r = match vd.physical_path(h) {
            Ok(p) => match disk_number_of(&p) {
                Some(n) => Ok((n, p)),
                None => Err(format!("answered {p:?}, not a \\\\.\\PhysicalDriveN path")),
            },
            Err(e) => Err(e.to_string()),
        };
        self.out.record(name, t, r)
    }

    /// ListDiskIDs asked until it lists disk `n` (Plug and Play surfaces a disk after
    /// `AttachVirtualDisk` returns), within the selftest's wait: its IDs, or why not.
    pub(super) async fn listed_ids(&mut self, n: u32) -> Result<DiskIds, String> {
        let wait = self.opts.wait;
        let disk = &mut self.c().disk;
        poll(wait, async || {
            let ids = disk
                .list_disk_ids()
                .await
                .map_err(|s| status("ListDiskIDs", &s))?;
            Ok(ids.get(&n).cloned())
        })
        .await?
        .ok_or(format!("disk {n} is not listed after {wait:?}"))
    }

    /// ListDiskIDs and ListDiskLocations list the new disk; it is the VHDX's size and empty.
    pub(super) async fn find_disk(&mut self) -> Result<(), Stop> {
        let n = self.disk.expect("attached");
        let t = Instant::now();
        let r = self.listed_ids(n).await.map(|id| {
            let answer = format!(
                "disk {n} listed after {} ms: page83 {:?}, serial {:?}",
                ms(t.elapsed()),
                id.page83,
                id.serial_number
            );
            (id.page83, answer)
        });
        self.page83 = self.out.record("ListDiskIDs", t, r)?;

        let t = Instant::now();
        let r = match self.c().disk.list_disk_locations().await {
            Ok(l) => Ok((
                (),
                match l.get(&n) {
                    Some(l) => format!(
                        "disk {n}: adapter {:?} bus {:?} target {:?} LUN {:?}",
                        l.adapter, l.bus, l.target, l.lun
                    ),
                    None => format!("disk {n} not listed (it has no SCSI address)"),
                },
            )),
            Err(s) => Err(status("ListDiskLocations", &s)),
        };
        self.out.record("ListDiskLocations", t, r)?;
        self.node_disk_ids().await?;

        // Refuse any disk that is not plainly the new VHDX: its size, and nothing on it.
        let t = Instant::now();
        let size = self.opts.size;
        let c = self.c();
        let r = async {
            let got = c
                .disk
                .disk_size(n)
                .await
                .map_err(|s| status("GetDiskStats", &s))?;
            if u64::try_from(got) != Ok(size) {
                return Err(format!(
                    "refusing disk {n}: it is {got} bytes, the VHDX this selftest attached is {size}"
                ));
            }
            let vols = c
                .volume
                .list_volumes_on_disk(n, 0)
                .await
                .map_err(|s| status("ListVolumesOnDisk", &s))?;
            if !vols.is_empty() {
                return Err(format!(
                    "refusing disk {n}: it holds volumes {vols:?}, the new VHDX holds none"
                ));
            }
            Ok(((), format!("disk {n} is the new VHDX: {got} bytes, no volumes")))
        }
        .await;
        self.out.record("own disk", t, r)
    }

    /// Records every disk whose serial is an EBS volume's (ledger row 35) or whose page 83 ID is
    /// a VMware NAA ID (ledger row 43), and, for every disk whose serial number gce-pd (v1.21+)
    /// reads as an NVMe namespace identifier, the serial verbatim (quoted: padding shows) and
    /// the identifier it yields (ledger row 66 is inferred: that ListDiskIDs' serial, read from
    /// `STORAGE_DEVICE_DESCRIPTOR`, is the string `MSFT_Disk.SerialNumber` gives upstream, with
    /// its `_` groups and trailing `.`, on an NVMe disk). A record, never a failure: compare it
    /// with `Get-Disk | Format-List Number,SerialNumber` on the node.
    async fn node_disk_ids(&mut self) -> Result<(), Stop> {
        let t = Instant::now();
        let r = match self.c().disk.list_disk_ids().await {
            Ok(ids) => {
                let mut found = Vec::new();
                for (n, id) in ids.iter() {
                    let (serial, page83) = (&id.serial_number, &id.page83);
                    if let Some(vol) = ebs_volume_id(serial) {
                        found.push(format!(
                            "disk {n}: serial {serial:?} is EBS volume {vol} (settles ledger row 35)"
                        ));
                    }
                    if is_vmware_naa(page83) {
                        found.push(format!(
                            "disk {n}: page83 {page83:?} is a VMware NAA ID (settles ledger row 43)"
                        ));
                    }
                    if let Some(ns) = gce_pd_namespace_id(serial) {
                        found.push(format!(
                            "disk {n}: serial {serial:?} gives namespace {ns:#018x} (page83 {page83:?})"
                        ));
                    }
                }
                let answer = if found.is_empty() {
                    "no disk has the NVMe serial gce-pd reads, an EBS volume's serial or a VMware \
                     NAA ID"
                        .to_string()
                } else {
                    found.join("; ")
                };
                Ok(((), answer))
            }
            Err(s) => Err(status("ListDiskIDs", &s)),
        };
        self.out.record("node disk IDs", t, r)
    }
}

/// Whether a page 83 identifier, as ListDiskIDs gives it (hex), is an NAA ID in VMware's
/// name space (NAA 6, IEEE company ID 00-0C-29), as a vSphere disk with `disk.EnableUUID` has.
fn is_vmware_naa(page83: &str) -> bool {
    page83
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("6000c29"))
}

/// The EBS volume ID an NVMe serial number names: `vol` and the ID's 17 hex digits, without
/// the ID's dash (the form Amazon's Windows guide maps back to `vol-…`).
fn ebs_volume_id(serial: &str) -> Option<String> {
    let digits = serial.strip_prefix("vol")?.get(..17)?;
    digits
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then(|| format!("vol-{digits}"))
}

/// The NVMe namespace identifier gce-pd reads from a serial number: without one trailing `.`
/// and every `_`, 32 characters whose first 16 are hex digits, which are the identifier.
fn gce_pd_namespace_id(serial: &str) -> Option<u64> {
    let cleaned = serial.strip_suffix('.').unwrap_or(serial).replace('_', "");
    if cleaned.len() != 32 {
        return None;
    }
    u64::from_str_radix(cleaned.get(..16)?, 16).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_vmware_naa_id_is_recognised() {
        assert!(super::is_vmware_naa("6000C2912345678901234567890abcde"));
        assert!(super::is_vmware_naa("6000c29aabbccdd"));
        for other in ["", "6000c2", "600a0980", "5000c29aa", "SIM0001"] {
            assert!(!super::is_vmware_naa(other), "{other}");
        }
    }

    #[test]
    fn an_ebs_serial_names_its_volume() {
        assert_eq!(
            super::ebs_volume_id("vol0123456789abcdef0"),
            Some("vol-0123456789abcdef0".into())
        );
        assert_eq!(
            super::ebs_volume_id("vol0123456789abcdef0_00000001."),
            Some("vol-0123456789abcdef0".into())
        );
        for other in [
            "SIM0001",
            "vol-0123456789abcdef0",
            "vol0123",
            "volume0123456789abcd",
        ] {
            assert_eq!(super::ebs_volume_id(other), None, "{other}");
        }
    }

    #[test]
    fn gce_pd_reads_the_namespace_from_the_first_sixteen_digits() {
        let ns = super::gce_pd_namespace_id("10CC_9636_B6E3_CE3B_0000_0000_0000_0000.");
        assert_eq!(ns, Some(0x10CC_9636_B6E3_CE3B));
        for other in [
            "SIM0001",
            "10CC_9636_B6E3_CE3B_0000_0000_0000_0000. ",
            "vol0123",
        ] {
            assert_eq!(super::gce_pd_namespace_id(other), None, "{other}");
        }
    }
}
