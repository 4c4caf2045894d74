//! The SMB step that tells how the client groups credentials per server (ledger row 12): with
//! `--smb-server NAME` and a connected mapping of NAME on the node (a session to NAME under the
//! mapping's user), a `MSFT_SmbGlobalMapping.Create` of `\\NAME\<the selftest's missing share>`
//! as a user of the selftest's own answers error 1219 ("Multiple connections to a server ...
//! using more than one user name") on a client that groups sessions by the name as written;
//! the same to `\\<NAME's address>\<that share>` then answers something else (a logon failure,
//! a missing share) there, and 1219 again only on a client that groups by the resolved
//! address, which would make the daemon's grouping by name wrong.
//!
//! Safe by construction, and so called on the thin layer, not through the daemon: on 1219 the
//! daemon's NewSmbGlobalMapping removes the server's mappings no volume uses (its repair for a
//! driver's request), and those are the node's. The user, `csi-proxy-selftest-nobody`, exists
//! nowhere and its password is made for this run: a failed logon of an account that does not
//! exist counts against no account, so nothing can be locked out (an account lockout threshold
//! counts failed logons of an existing account). The share is the selftest's own name, which
//! does not exist; a mapping made after all is removed at once. The node's mappings are only
//! read.

use super::smb::SmbServer;
use csi_proxy_host::windows::os::Win32;
use csi_proxy_host::windows::smb::{credential_string, method_code};
use std::time::Instant;

/// The step's recorded name.
pub const STEP: &str = "SMB: a second user on a mapped server, by name and by address";

/// ERROR_SESSION_CREDENTIAL_CONFLICT.
const CONFLICT: u32 = 1219;

/// The user the step maps as: no account of that name exists.
const NOBODY: &str = "csi-proxy-selftest-nobody";

/// Runs the step against `server`, or lists it as not run saying what it needs.
pub(super) fn run(out: &mut super::Outcome, os: &dyn Win32, server: Option<&SmbServer>) {
    let Some(server) = server else {
        out.not_run(
            STEP,
            "not run: needs --smb-server naming a server this node already maps",
        );
        return;
    };
    let name = &server.name;
    let connected: Vec<&str> = match &server.mapped {
        Ok(m) => m
            .iter()
            .filter(|(_, status)| *status == 0)
            .map(|(r, _)| r.as_str())
            .collect(),
        Err(e) => {
            out.not_run(
                STEP,
                format!("not run: the node's mappings cannot be read ({e})"),
            );
            return;
        }
    };
    if connected.is_empty() {
        out.not_run(
            STEP,
            format!(
                "not run: needs a connected mapping of {name:?} on this node (a session to it \
                 under another user); it has none"
            ),
        );
        return;
    }
    let address = match &server.address {
        Ok((a, mapped)) if mapped.is_empty() => *a,
        Ok((a, mapped)) => {
            out.not_run(
                STEP,
                format!(
                    "not run: this node maps {name}'s address {a} too ({mapped:?}), so a \
                     session by the address exists either way"
                ),
            );
            return;
        }
        Err(e) => {
            out.not_run(STEP, format!("not run: needs {name}'s address: {e}"));
            return;
        }
    };
    let t = Instant::now();
    let share = format!("csi-proxy-selftest-{}", std::process::id());
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let credential = credential_string(NOBODY, &format!("not-a-password-{stamp:x}"));
    let mut made = Vec::new();
    let mut create = |server: &str| {
        let root = format!(r"\\{server}\{share}");
        let code = method_code(os.smb_create_global_mapping(&root, false, Some(&credential)))
            .map_err(|e| format!("MSFT_SmbGlobalMapping.Create of {root}: {e}"))?;
        if code == 0 {
            made.push(root.clone());
        }
        Ok::<_, String>((root, code))
    };
    let r = create(name).and_then(|(by_name, code)| {
        if code != CONFLICT {
            return Err(format!(
                "{by_name} as {NOBODY}: error {code}, not {CONFLICT}, while this node maps \
                 {connected:?} (ledger row 12 models one set of credentials per server: error \
                 {CONFLICT})"
            ));
        }
        let (by_address, code) = create(&address.to_string())?;
        let answers = format!("{by_name}: error {CONFLICT}; {by_address}: error {code}");
        match code {
            CONFLICT => Err(format!(
                "{answers}: the client groups sessions by the resolved address, not by the name \
                 as written (ledger row 12 models the name; the daemon's 1219 grouping relies \
                 on it)"
            )),
            0 => Err(format!(
                "{answers}: mapped as {NOBODY}, a user that exists nowhere (ledger row 12)"
            )),
            _ => Ok((
                (),
                format!(
                    "{answers}, not {CONFLICT}: the client groups sessions by the name as \
                     written (settles ledger row 12)"
                ),
            )),
        }
    });
    let _ = out.record(STEP, t, r);
    for root in made {
        let t = Instant::now();
        let r = match method_code(os.smb_remove_global_mapping(&root)) {
            Ok(0) => Ok(((), format!("{root} removed"))),
            Ok(code) => Err(format!(
                "MSFT_SmbGlobalMapping.Remove of {root}: error {code}"
            )),
            Err(e) => Err(format!("MSFT_SmbGlobalMapping.Remove of {root}: {e}")),
        };
        let _ = out.record("clean-up: SMB remove the second user's mapping", t, r);
    }
}
