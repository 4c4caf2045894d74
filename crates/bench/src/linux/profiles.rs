//! What a profile costs a call: PathExists and Mkdir (an existing directory, as drivers make
//! their staging directory on every stage) through one daemon binary started without
//! `--profiles` and with one profile served at the default sockets, on a path in the driver's
//! plugin directory and on a publish target in a pod directory the profile claimed (kubelet's
//! record read once, then the book asked). Daemon CPU per call and median latency, sequential
//! calls on one connection, each daemon measured twice in alternating order.

use super::*;

const DRIVER: &str = "bench.csi.example.com";

/// The two places of a call, below the kubelet path.
const PLACES: [(&str, &str); 2] = [
    (
        "plugin directory",
        "plugins/kubernetes.io/csi/bench.csi.example.com/5f1c/globalmount",
    ),
    (
        "claimed pod directory",
        "pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount",
    ),
];

/// One daemon, profiled or not, with kubelet's directories and records made.
fn daemon(bin: &Path, profiled: bool) -> Result<Daemon, String> {
    let d = Daemon::spawn_with(bin, |dir| {
        let mut args = vec![format!("--state-dir={}", dir.join("state").display())];
        if profiled {
            let file = dir.join("profiles.toml");
            let text = format!(
                "[[profile]]\ndriver = \"{DRIVER}\"\nsocket_dir = \"{}\"\n\
                 groups = [\"filesystem\", \"disk\", \"volume\"]\n",
                dir.join("run").display()
            );
            if std::fs::write(&file, text).is_ok() {
                args.push(format!("--profiles={}", file.display()));
            }
        }
        args
    })?;
    for (_, rel) in PLACES {
        let path = d.kubelet().join(rel);
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let record = path.parent().unwrap_or(&path).join("vol_data.json");
        std::fs::write(&record, format!(r#"{{"driverName":"{DRIVER}"}}"#))
            .map_err(|e| format!("{}: {e}", record.display()))?;
    }
    Ok(d)
}

/// Daemon CPU per call and median latency of `calls` PathExists, then Mkdir, at `path`.
async fn costs(d: &Daemon, path: &str, calls: usize) -> Result<[String; 4], String> {
    let c = d.connector();
    wait_all_serving(&c, Duration::from_secs(30)).await?;
    let fs = FilesystemClient::connect(&c)
        .await
        .map_err(|e| e.to_string())?;
    let exists = || {
        let mut fs = fs.clone();
        async move { fs.path_exists(path).await.map(drop) }
    };
    let mkdir = || {
        let mut fs = fs.clone();
        async move { fs.mkdir(path).await.map(drop) }
    };
    // Warm: the first call of a claimed directory reads kubelet's record and claims it.
    exists()
        .await
        .map_err(|s| format!("PathExists {path}: {s}"))?;
    let pid = d.child.id();
    let err = |s: Status| format!("{path}: {s}");
    let pe_cpu = cpu_per_call(pid, calls, exists).await.map_err(err)?;
    let mk_cpu = cpu_per_call(pid, calls, mkdir).await.map_err(err)?;
    let pe = sequential(calls, exists).await.map_err(err)?;
    let mk = sequential(calls, mkdir).await.map_err(err)?;
    Ok([
        fmt_d(pe_cpu),
        fmt_d(pe.quantile(0.5)),
        fmt_d(mk_cpu),
        fmt_d(mk.quantile(0.5)),
    ])
}

/// The table: a row per place and daemon, two rounds in alternating order.
pub(super) async fn profile_costs(bin: &Path, calls: usize) -> Result<Vec<Vec<String>>, String> {
    let mut rows = Vec::new();
    for round in 1..=2 {
        let order = if round == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for profiled in order {
            let d = daemon(bin, profiled)?;
            for (what, rel) in PLACES {
                let path = d.kubelet().join(rel).display().to_string();
                let [pe_cpu, pe, mk_cpu, mk] = costs(&d, &path, calls).await?;
                rows.push(vec![
                    format!("round {round}"),
                    if profiled {
                        "one profile"
                    } else {
                        "no profiles"
                    }
                    .into(),
                    what.into(),
                    format!("{pe_cpu} / {pe}"),
                    format!("{mk_cpu} / {mk}"),
                ]);
            }
        }
    }
    Ok(rows)
}
