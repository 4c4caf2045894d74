//! The listings: each gathers rows through the client crate and renders as a table or JSON.

use crate::Output;
use csi_proxy_client::disk::DiskClient;
use csi_proxy_client::health;
use csi_proxy_client::iscsi::{IscsiClient, Portal};
use csi_proxy_client::volume::VolumeClient;
use csi_proxy_client::{ClientError, Connector};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::fmt;
use tonic::{Code, Status};

/// Why a listing could not be produced at all.
#[derive(Debug)]
pub enum Failure {
    /// No endpoint of the group answered: the daemon is down or the socket dir is wrong.
    Unreachable(String),
    /// The daemon answered the listing's first call with an error.
    Rpc(String),
    /// A file the listing reads could not be read (the owners book).
    File(String),
    /// A file named on the command line is wrong (the profiles file).
    BadInput(String),
}

impl Failure {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Unreachable(_) => 3,
            Failure::Rpc(_) | Failure::File(_) => 1,
            Failure::BadInput(_) => 2,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unreachable(m) => write!(f, "daemon not reachable: {m}"),
            Failure::Rpc(m) | Failure::File(m) | Failure::BadInput(m) => f.write_str(m),
        }
    }
}

fn unreachable(e: ClientError) -> Failure {
    Failure::Unreachable(e.to_string())
}

/// Describes a failed call: `<Rpc> (<group> <version>) <object>: <code>: <message>`.
fn describe(rpc: &str, group: &str, version: &str, object: &str, s: &Status) -> String {
    let object = if object.is_empty() {
        String::new()
    } else {
        format!(" {object}")
    };
    format!(
        "{rpc} ({group} {version}){object}: {:?}: {}",
        s.code(),
        s.message()
    )
}

/// A first call that fails ends the listing; a dropped connection means the daemon went away.
fn first_call(rpc: &str, group: &str, version: &str, s: Status) -> Failure {
    let m = describe(rpc, group, version, "", &s);
    if s.code() == Code::Unavailable {
        Failure::Unreachable(m)
    } else {
        Failure::Rpc(m)
    }
}

/// Rows of one listing plus the errors of calls that failed along the way.
pub struct Report {
    /// JSON key of the row list, e.g. `disks`.
    pub key: &'static str,
    /// Column names, in order (also the JSON field names).
    pub columns: &'static [&'static str],
    /// One value per column per row.
    pub rows: Vec<Vec<Value>>,
    /// Calls that failed; the affected cells are null.
    pub errors: Vec<String>,
    /// Extra top-level JSON fields (e.g. which API version answered).
    pub meta: Map<String, Value>,
}

impl Report {
    fn new(key: &'static str, columns: &'static [&'static str]) -> Self {
        Report {
            key,
            columns,
            rows: Vec::new(),
            errors: Vec::new(),
            meta: Map::new(),
        }
    }

    /// Prints to stdout in `format`.
    pub fn print(&self, format: Output) {
        match format {
            Output::Json => println!("{}", self.to_json()),
            Output::Table => print!("{}", self.to_table()),
        }
    }

    /// The JSON document: `{"<key>": [{column: value}], "errors": [...], ...meta}`.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                Value::Object(
                    self.columns
                        .iter()
                        .zip(r)
                        .map(|(c, v)| (c.to_string(), v.clone()))
                        .collect(),
                )
            })
            .collect();
        let mut doc = self.meta.clone();
        doc.insert(self.key.to_string(), Value::Array(rows));
        doc.insert("errors".into(), json!(self.errors));
        Value::Object(doc)
    }

    /// Aligned columns with an upper-case header; null is `-`, lists are comma-separated.
    pub fn to_table(&self) -> String {
        let header: Vec<String> = self
            .columns
            .iter()
            .map(|c| c.to_uppercase().replace('_', " "))
            .collect();
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .zip(self.columns.iter())
                    .map(|(v, c)| match v.as_u64() {
                        // Sizes for people in the table; JSON keeps the bytes.
                        Some(n) if BYTE_COLUMNS.contains(c) => human_bytes(n),
                        _ => cell(v),
                    })
                    .collect()
            })
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for r in &cells {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |r: &[String]| {
            let mut s = String::new();
            for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
                if i + 1 == r.len() {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}  "));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&header);
        for r in &cells {
            out.push_str(&line(r));
        }
        if cells.is_empty() {
            out.push_str(&format!("(no {})\n", self.key.replace('_', " ")));
        }
        out
    }
}

/// Columns whose numbers are byte counts.
const BYTE_COLUMNS: [&str; 2] = ["size", "used"];

/// `n` bytes in binary units with one decimal (`10.0 GiB`, `512.0 MiB`), bytes below 1 KiB.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "-".into(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// `disks`: ListDiskIDs and ListDiskLocations, then GetDiskStats and GetDiskState per disk.
pub async fn disks(c: &Connector) -> Result<Report, Failure> {
    let mut d = DiskClient::connect(c).await.map_err(unreachable)?;
    let v = d.version();
    let ids = d
        .list_disk_ids()
        .await
        .map_err(|s| first_call("ListDiskIDs", "disk", v, s))?;
    let mut r = Report::new(
        "disks",
        &[
            "number", "adapter", "bus", "target", "lun", "page83", "serial", "size", "online",
        ],
    );
    r.meta.insert("disk_api".into(), json!(v));
    let locations = match d.list_disk_locations().await {
        Ok(l) => l,
        Err(s) => {
            r.errors
                .push(describe("ListDiskLocations", "disk", v, "", &s));
            Default::default()
        }
    };
    let numbers: BTreeSet<u32> = ids.keys().chain(locations.keys()).copied().collect();
    for n in numbers {
        let object = format!("disk {n}");
        let size = match d.disk_size(n).await {
            Ok(s) => json!(s),
            Err(s) => {
                r.errors
                    .push(describe("GetDiskStats", "disk", v, &object, &s));
                Value::Null
            }
        };
        let online = match d.is_online(n).await {
            Ok(o) => json!(o),
            Err(s) => {
                r.errors
                    .push(describe("GetDiskState", "disk", v, &object, &s));
                Value::Null
            }
        };
        let id = ids.get(&n).cloned().unwrap_or_default();
        let loc = locations.get(&n).cloned().unwrap_or_default();
        r.rows.push(vec![
            json!(n),
            json!(loc.adapter),
            json!(loc.bus),
            json!(loc.target),
            json!(loc.lun),
            json!(id.page83),
            json!(id.serial_number),
            size,
            online,
        ]);
    }
    Ok(r)
}

/// `volumes`: per disk ListVolumesOnDisk (all partitions, then partition by partition to learn
/// each volume's partition), IsVolumeFormatted and (for formatted ones) GetVolumeStats per
/// volume. The API lists no mount points, so each block-device mount in the node's mount table
/// is resolved with GetVolumeIDFromTargetPath, which also gives the filesystem type.
pub async fn volumes(c: &Connector, only: Option<u32>) -> Result<Report, Failure> {
    let mut vol = VolumeClient::connect(c).await.map_err(unreachable)?;
    let vv = vol.version();
    let disks: Vec<u32> = match only {
        Some(n) => vec![n],
        None => {
            let mut d = DiskClient::connect(c).await.map_err(unreachable)?;
            let dv = d.version();
            d.list_disk_ids()
                .await
                .map_err(|s| first_call("ListDiskIDs", "disk", dv, s))?
                .into_keys()
                .collect()
        }
    };
    let mut r = Report::new(
        "volumes",
        &[
            "id",
            "disk",
            "partition",
            "formatted",
            "filesystem",
            "size",
            "used",
            "mount_points",
        ],
    );
    r.meta.insert("volume_api".into(), json!(vv));
    let mut mounted: std::collections::HashMap<String, Vec<(String, String)>> = Default::default();
    for (point, fs) in local::block_mounts() {
        // Mounts outside the daemon's roots are refused by it; they are not CSI volumes.
        if let Ok(id) = vol.volume_id_from_target_path(&point).await {
            mounted.entry(id).or_default().push((point, fs));
        }
    }
    for disk in disks {
        let object = format!("disk {disk}");
        let ids = match vol.list_volumes_on_disk(disk, 0).await {
            Ok(ids) => ids,
            Err(s) if only.is_some() => {
                return Err(first_call("ListVolumesOnDisk", "volume", vv, s));
            }
            Err(s) => {
                r.errors
                    .push(describe("ListVolumesOnDisk", "volume", vv, &object, &s));
                continue;
            }
        };
        let mut partition_of = std::collections::HashMap::new();
        // Partitions are numbered from 1 and almost always contiguous; stop at the first number
        // the host refuses, once every volume is placed, or after a generous bound.
        let bound = u32::try_from(ids.len())
            .unwrap_or(u32::MAX)
            .saturating_add(8);
        for p in 1..=bound.min(128) {
            if partition_of.len() == ids.len() {
                break;
            }
            match vol.list_volumes_on_disk(disk, p).await {
                Ok(on_p) => {
                    for id in on_p {
                        partition_of.entry(id).or_insert(p);
                    }
                }
                Err(_) => break,
            }
        }
        for id in ids {
            let object = format!("volume {id}");
            let formatted = match vol.is_formatted(&id).await {
                Ok(f) => Some(f),
                Err(s) => {
                    r.errors
                        .push(describe("IsVolumeFormatted", "volume", vv, &object, &s));
                    None
                }
            };
            // An unformatted volume has no filesystem to measure: no stats, and no error.
            let (size, used) = match formatted {
                Some(false) => (Value::Null, Value::Null),
                _ => match vol.stats(&id).await {
                    Ok((t, u)) => (json!(t), json!(u)),
                    Err(s) => {
                        r.errors
                            .push(describe("GetVolumeStats", "volume", vv, &object, &s));
                        (Value::Null, Value::Null)
                    }
                },
            };
            let formatted = formatted.map_or(Value::Null, Value::Bool);
            let mounts = mounted.remove(&id).unwrap_or_default();
            let fs = mounts.first().map(|(_, fs)| fs.clone());
            let points: Vec<String> = mounts.into_iter().map(|(p, _)| p).collect();
            r.rows.push(vec![
                json!(id),
                json!(disk),
                partition_of.get(&id).map_or(Value::Null, |p| json!(p)),
                formatted,
                fs.map_or(Value::Null, Value::String),
                size,
                used,
                json!(points),
            ]);
        }
    }
    Ok(r)
}

/// `smb mappings`: the SMB API has no list call, so the mappings are read from the node itself
/// (Linux: CIFS/SMB3 mounts in the mount table); the daemon is checked to be up first.
pub async fn smb_mappings(c: &Connector) -> Result<Report, Failure> {
    let (v, _) = c.newest("smb").await.map_err(unreachable)?;
    let mut r = Report::new("mappings", &["remote_path", "local_path", "type"]);
    r.meta.insert("smb_api".into(), json!(v));
    r.meta.insert(
        "source".into(),
        json!("node mount table (the SMB API has no list call)"),
    );
    for (remote, local, kind) in local::smb_mounts().map_err(Failure::Rpc)? {
        r.rows.push(vec![json!(remote), json!(local), json!(kind)]);
    }
    Ok(r)
}

/// The newest iSCSI client, its API version and the portals it lists: where both iSCSI reports
/// start.
async fn iscsi_portal_list(
    c: &Connector,
) -> Result<(IscsiClient, &'static str, Vec<Portal>), Failure> {
    let mut i = IscsiClient::connect(c).await.map_err(unreachable)?;
    let v = i.version();
    let portals = i
        .list_target_portals()
        .await
        .map_err(|s| first_call("ListTargetPortals", "iscsi", v, s))?;
    Ok((i, v, portals))
}

/// `iscsi portals`: ListTargetPortals.
pub async fn iscsi_portals(c: &Connector) -> Result<Report, Failure> {
    let (_, v, portals) = iscsi_portal_list(c).await?;
    let mut r = Report::new("portals", &["address", "port"]);
    r.meta.insert("iscsi_api".into(), json!(v));
    for p in portals {
        r.rows.push(vec![json!(p.address), json!(p.port)]);
    }
    Ok(r)
}

/// `iscsi sessions`: per portal DiscoverTargetPortal, then GetTargetDisks per target; a target
/// with disks has a logged-in session.
pub async fn iscsi_sessions(c: &Connector) -> Result<Report, Failure> {
    let (mut i, v, portals) = iscsi_portal_list(c).await?;
    let mut r = Report::new("sessions", &["portal", "iqn", "connected", "disks"]);
    r.meta.insert("iscsi_api".into(), json!(v));
    for p in portals {
        let portal = format!("{}:{}", p.address, p.port);
        let iqns = match i.discover_targets(&p).await {
            Ok(q) => q,
            Err(s) => {
                let o = format!("portal {portal}");
                r.errors
                    .push(describe("DiscoverTargetPortal", "iscsi", v, &o, &s));
                continue;
            }
        };
        for iqn in iqns {
            match i.target_disks(&p, &iqn).await {
                Ok(disks) => r.rows.push(vec![
                    json!(portal),
                    json!(iqn),
                    json!(!disks.is_empty()),
                    json!(disks),
                ]),
                Err(s) => {
                    let o = format!("target {iqn} on {portal}");
                    r.errors
                        .push(describe("GetTargetDisks", "iscsi", v, &o, &s));
                }
            }
        }
    }
    Ok(r)
}

/// `health`: grpc.health.v1 Check on every endpoint.
pub async fn health(c: &Connector) -> Result<Report, Failure> {
    let mut r = Report::new("endpoints", &["group", "version", "endpoint", "status"]);
    let mut reachable = 0;
    for group in csi_proxy_api::GROUPS {
        for version in csi_proxy_api::versions(group).unwrap_or_default() {
            let service = health::service_name(group, version);
            let status = match health::check(c, group, version, &service).await {
                Ok(s) => {
                    reachable += 1;
                    json!(s.as_str_name())
                }
                Err(e) => {
                    r.errors.push(format!("{group} {version}: {e}"));
                    Value::Null
                }
            };
            r.rows.push(vec![
                json!(group),
                json!(version),
                json!(c.endpoint_name(group, version)),
                status,
            ]);
        }
    }
    if reachable == 0 {
        return Err(Failure::Unreachable(format!(
            "no endpoint answered (first: {})",
            r.errors.first().map_or("", String::as_str)
        )));
    }
    Ok(r)
}

/// Facts only the node itself has: its mount table.
#[cfg(target_os = "linux")]
mod local {
    use csi_proxy_host::linux::mountinfo::{self, MountInfo};

    /// (mount point, filesystem type) of every mount of a block device (`/dev/...`).
    pub fn block_mounts() -> Vec<(String, String)> {
        mountinfo::read()
            .unwrap_or_default()
            .into_iter()
            .filter(|m: &MountInfo| m.source.starts_with("/dev/"))
            .map(|m| (m.mount_point.display().to_string(), m.fs_type))
            .collect()
    }

    /// (remote share, local mount point, filesystem type) of every CIFS/SMB3 mount.
    pub fn smb_mounts() -> Result<Vec<(String, String, String)>, String> {
        let table = mountinfo::read().map_err(|e| format!("reading the mount table: {e}"))?;
        Ok(table
            .into_iter()
            .filter(|m| m.fs_type == "cifs" || m.fs_type == "smb3")
            .map(|m| (m.source, m.mount_point.display().to_string(), m.fs_type))
            .collect())
    }
}

#[cfg(not(target_os = "linux"))]
mod local {
    /// No mount table to read here: volumes show no filesystem type or mount points.
    pub fn block_mounts() -> Vec<(String, String)> {
        Vec::new()
    }

    pub fn smb_mounts() -> Result<Vec<(String, String, String)>, String> {
        Err(
            "listing SMB global mappings is not part of the csi-proxy API; on Windows run \
             Get-SmbGlobalMapping"
                .into(),
        )
    }
}

/// `profiles`: one row per profile of the file at `file` (driver, where its endpoints are
/// named, its groups and extra paths) with what it holds per the owners book in the state
/// directory `state`; then a row per holder the book names that the file does not list (a
/// profile removed from the file still holds its objects until they are released).
pub fn profiles(file: &std::path::Path, state: &std::path::Path) -> Result<Report, Failure> {
    use csi_proxy_core::profiles::owners::{self, Object};
    let specs = csi_proxy_host::profiles_file::read(file).map_err(Failure::BadInput)?;
    let book =
        csi_proxy_host::format_record::read_state_file(state, owners::FILE_NAME).map_err(|e| {
            Failure::File(format!(
                "owners book {}: {e}",
                state.join(owners::FILE_NAME).display()
            ))
        })?;
    let found = book.is_some();
    let book = owners::parse(&book.unwrap_or_default());
    let mut held: std::collections::BTreeMap<&str, [Vec<&str>; 5]> = Default::default();
    for (object, holders) in &book {
        let (i, key) = match object {
            Object::Dir(k) => (0, k),
            Object::SmbMapping(k) => (1, k),
            Object::Portal(k) => (2, k),
            Object::Session(k) => (3, k),
            Object::Storage(k) => (4, k),
        };
        for h in holders {
            held.entry(h.as_str()).or_default()[i].push(key);
        }
    }
    let unlisted: Vec<String> = held
        .keys()
        .filter(|h| !specs.iter().any(|s| s.profile.driver == **h))
        .map(|h| h.to_string())
        .collect();
    let mut r = Report::new(
        "profiles",
        &[
            "driver",
            "place",
            "groups",
            "paths",
            "directories",
            "smb_mappings",
            "portals",
            "sessions",
            "storage",
        ],
    );
    let mut row = |driver: &str, place: Value, groups: Value, paths: Value| {
        let [dirs, smb, portals, sessions, storage] = held.remove(driver).unwrap_or_default();
        r.rows.push(vec![
            json!(driver),
            place,
            groups,
            paths,
            json!(dirs),
            json!(smb),
            json!(portals),
            json!(sessions),
            json!(storage),
        ]);
    };
    for s in &specs {
        let groups: Vec<&str> = s.profile.groups.iter().map(|g| g.as_str()).collect();
        row(
            &s.profile.driver,
            json!(s.place),
            json!(groups),
            json!(s.profile.paths),
        );
    }
    for h in &unlisted {
        row(h, Value::Null, Value::Null, Value::Null);
    }
    r.meta.insert(
        "owners_book".into(),
        json!(state.join(owners::FILE_NAME).display().to_string()),
    );
    r.meta.insert("owners_book_found".into(), json!(found));
    r.meta.insert("not_in_file".into(), json!(unlisted));
    Ok(r)
}

/// `selftest`: one row per step (step, result, time, what Windows answered).
pub fn selftest(o: &csi_proxy_ctl::selftest::Outcome) -> Report {
    let mut r = Report::new("steps", &["step", "result", "time_ms", "answer"]);
    for s in &o.steps {
        r.rows.push(vec![
            json!(s.name),
            json!(match (s.ran, s.ok) {
                (false, _) => "not run",
                (true, true) => "ok",
                (true, false) => "FAILED",
            }),
            json!(s.time.as_millis() as u64),
            json!(s.answer),
        ]);
    }
    r.meta.insert("passed".into(), json!(o.failed().is_none()));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_did_not_run_is_listed_as_not_run_never_as_passed_or_failed() {
        use csi_proxy_ctl::selftest::{Outcome, Step};
        let step = |name: &str, ok, ran| Step {
            name: name.into(),
            ok,
            ran,
            time: std::time::Duration::ZERO,
            answer: String::new(),
        };
        let o = Outcome {
            steps: vec![
                step("a", true, true),
                step("b", false, false),
                step("c", false, true),
            ],
        };
        let json = selftest(&o).to_json();
        let results: Vec<&str> = json["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["result"].as_str().unwrap())
            .collect();
        assert_eq!(results, ["ok", "not run", "FAILED"]);
        assert_eq!(json["passed"], json!(false));
        let only_skipped = Outcome {
            steps: vec![step("a", true, true), step("b", false, false)],
        };
        assert_eq!(selftest(&only_skipped).to_json()["passed"], json!(true));
    }

    #[test]
    fn sizes_are_for_people_in_tables_and_bytes_in_json() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(10 << 30), "10.0 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
        let mut r = Report::new("volumes", &["id", "size", "used"]);
        r.rows.push(vec![json!("v"), json!(512u64 << 20), json!(7)]);
        let table = r.to_table();
        assert!(
            table.contains("512.0 MiB") && table.contains("7 B"),
            "{table}"
        );
        assert_eq!(r.to_json()["volumes"][0]["size"], json!(512u64 << 20));
    }

    #[test]
    fn tables_align_and_render_nulls_and_lists() {
        let mut r = Report::new("things", &["id", "size", "mount_points", "ok"]);
        r.rows.push(vec![
            json!("a"),
            json!(10),
            json!(["/x", "/y"]),
            json!(true),
        ]);
        r.rows
            .push(vec![json!("long-id"), Value::Null, json!([]), json!(false)]);
        assert_eq!(
            r.to_table(),
            "ID       SIZE  MOUNT POINTS  OK\n\
             a        10 B  /x,/y         yes\n\
             long-id  -     -             no\n"
        );
        let j = r.to_json();
        assert_eq!(j["things"][0]["mount_points"][1], "/y");
        assert!(j["things"][1]["size"].is_null());
        assert_eq!(j["errors"], json!([]));
    }

    #[test]
    fn an_empty_listing_says_so() {
        let r = Report::new("sessions", &["portal"]);
        assert_eq!(r.to_table(), "PORTAL\n(no sessions)\n");
    }
}
