//! `deploy/windows/install.ps1` against docs/install.md's own service snippet: the script must set
//! up the service's recovery exactly as the snippet does, on a new install and on an upgrade.
//! Before, README said the script did what the snippet does, yet the script never ran
//! `sc.exe failureflag csiproxy 1`, so the SCM never restarted the service after the failures the
//! daemon reports (it reports SERVICE_STOPPED with a service-specific exit code, and without the
//! flag failure actions apply only to a service that ends without reporting STOPPED).

const README: &str = include_str!("../../../docs/install.md");
const INSTALL: &str = include_str!("../../../deploy/windows/install.ps1");

/// The `sc.exe <verb> csiproxy <rest>` lines of docs/install.md's service snippet that set recovery.
fn readme_recovery_lines() -> Vec<(String, String)> {
    let lines: Vec<(String, String)> = README
        .lines()
        .filter_map(|l| l.trim().strip_prefix("sc.exe "))
        .filter_map(|l| {
            let mut words = l.splitn(3, ' ');
            let (verb, service, rest) = (words.next()?, words.next()?, words.next().unwrap_or(""));
            (service == "csiproxy" && verb.starts_with("failure"))
                .then(|| (verb.to_string(), rest.to_string()))
        })
        .collect();
    assert!(
        lines.iter().any(|(verb, _)| verb == "failureflag"),
        "docs/install.md's snippet no longer sets the failure flag: {lines:?}"
    );
    lines
}

#[test]
fn install_ps1_sets_the_recovery_readme_promises_on_install_and_upgrade() {
    // Both branches (create, config) end before recovery is set, so an upgrade of an install
    // made without it gets it too.
    let branches_end = INSTALL
        .find("Invoke-Sc config")
        .expect("install.ps1 no longer reconfigures an existing service");
    for (verb, rest) in readme_recovery_lines() {
        let call = format!("Invoke-Sc {verb} $name {rest}");
        let at = INSTALL.find(&call).unwrap_or_else(|| {
            panic!("install.ps1 does not run docs/install.md's `sc.exe {verb} csiproxy {rest}`")
        });
        assert!(
            at > branches_end,
            "install.ps1 runs `{call}` only on a new install, not on an upgrade"
        );
    }
}

#[test]
fn every_sc_call_in_install_ps1_is_checked() {
    // A failing sc.exe must stop the script, not leave a service without recovery silently.
    for line in INSTALL.lines().map(str::trim) {
        assert!(
            !line.starts_with("& sc.exe") || line.contains("@args"),
            "an sc.exe call outside Invoke-Sc (its exit code unchecked): {line}"
        );
    }
}

/// The script's wait for the service to stop (an upgrade) outlasts the daemon's drain: the pipes
/// close within 5 s, then calls in flight get up to STOP_LIMIT. A 30 s wait against a 60 s drain
/// threw before the binary was copied whenever a format was running.
#[test]
fn install_ps1_waits_for_the_stop_longer_than_the_daemon_drains() {
    const LIFECYCLE: &str = include_str!("../src/service_lifecycle.rs");
    let limit: u64 = LIFECYCLE
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("pub const STOP_LIMIT: Duration = Duration::from_secs(")?
                .strip_suffix(");")?
                .parse()
                .ok()
        })
        .expect("service_lifecycle.rs no longer states STOP_LIMIT in seconds");
    let wait = INSTALL
        .lines()
        .find_map(|l| {
            let at = l.find("WaitForStatus('Stopped', '")? + "WaitForStatus('Stopped', '".len();
            let hms: Vec<u64> = l[at..at + 8]
                .split(':')
                .map(|p| p.parse().unwrap())
                .collect();
            Some(hms[0] * 3600 + hms[1] * 60 + hms[2])
        })
        .expect("install.ps1 no longer waits for the service to stop");
    assert!(
        wait >= limit + 5,
        "install.ps1 waits {wait} s for the stop, the daemon may drain for {limit} s after 5 s"
    );
    assert!(
        INSTALL.contains("Stop-Service -Name $name -NoWait"),
        "Stop-Service waits on its own terms before the script's wait"
    );
}

/// SERVICE_FAILURE_ACTIONS_FLAG's page: "The change takes effect the next time the system is
/// started." The script and docs/install.md both say so next to the flag.
#[test]
fn the_failure_flag_is_said_to_act_from_the_next_boot() {
    assert!(INSTALL.contains("acts from the next reboot"));
    assert!(README.contains("takes effect the next time the system is started"));
}
