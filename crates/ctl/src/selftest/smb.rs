//! The optional SMB step (`--smb-server`): how a failed `MSFT_SmbGlobalMapping.Create` reaches
//! the daemon on this build (ledger row 38), shown by mapping a share that does not exist.
//!
//! Safe by construction: the share's name is the selftest's own (`csi-proxy-selftest-<pid>`),
//! so no mapping of the node has its root and the daemon has none to reuse or replace; no
//! credentials are sent (the node's own identity), so no account can be locked out. With a
//! server the node already maps the step is not run: a mapping without credentials to it
//! could answer error 1219, on which the daemon removes that server's mappings no volume uses
//! (its repair for a driver's request), which are not the selftest's. That server is the
//! condition of the other SMB step ([`super::smb_names`], ledger row 12), which calls Windows
//! itself. Should the server have a share of that name after all, the mapping made is removed
//! at once.

use super::status;
use csi_proxy_client::Connector;
use csi_proxy_client::smb::SmbClient;
use csi_proxy_host::windows::os::Win32;
use std::net::IpAddr;
use std::time::Instant;

/// The SMB server the operator names, the node's global mappings of it (by the server name as
/// written, as the SMB client groups them) and of its address, or why they could not be read.
#[derive(Debug, Clone)]
pub struct SmbServer {
    /// Its name or address, as `\\<name>\share` would write it.
    pub name: String,
    /// The node's mappings of it (`MSFT_SmbGlobalMapping` `RemotePath` and `Status`), read
    /// before the selftest starts.
    pub mapped: Result<Vec<(String, u32)>, String>,
    /// The address the name resolves to (IPv4 first) and the node's mappings of that address;
    /// resolved only when the node has a connected mapping of the server (what the
    /// name-and-address step needs), else why not.
    pub address: Result<(IpAddr, Vec<String>), String>,
}

/// The mappings among `all` whose server is `server` as written (case-insensitive).
fn of_server(all: &[(String, u32)], server: &str) -> Vec<(String, u32)> {
    let prefix = format!(r"\\{}\", server.to_ascii_lowercase());
    all.iter()
        .filter(|(r, _)| r.to_ascii_lowercase().starts_with(&prefix))
        .cloned()
        .collect()
}

/// `server` with this node's global mappings of it, as `os` lists them, its address resolved
/// by the system's resolver (`getaddrinfo`, port 445).
pub fn smb_server(os: &dyn Win32, server: &str) -> SmbServer {
    smb_server_with(os, server, &|name| {
        use std::net::ToSocketAddrs;
        let all: Vec<IpAddr> = (name, 445)
            .to_socket_addrs()
            .map_err(|e| format!("resolving {name}: {e}"))?
            .map(|a| a.ip())
            .collect();
        all.iter()
            .find(|a| a.is_ipv4())
            .or(all.first())
            .copied()
            .ok_or(format!("{name} resolves to no address"))
    })
}

/// [`smb_server`], the name resolved by `resolve`.
pub fn smb_server_with(
    os: &dyn Win32,
    server: &str,
    resolve: &dyn Fn(&str) -> Result<IpAddr, String>,
) -> SmbServer {
    let name = server.trim_start_matches('\\').to_string();
    let all = os
        .smb_global_mappings()
        .map_err(|e| format!("listing MSFT_SmbGlobalMapping: {e}"));
    let mapped = all
        .as_ref()
        .map(|a| of_server(a, &name))
        .map_err(Clone::clone);
    let address = match (&all, &mapped) {
        _ if name.parse::<IpAddr>().is_ok() => Err(format!("{name} is an address, not a name")),
        (Ok(all), Ok(m)) if m.iter().any(|(_, status)| *status == 0) => resolve(&name).map(|a| {
            let listed = of_server(all, &a.to_string()).into_iter().map(|(r, _)| r);
            (a, listed.collect())
        }),
        (Err(e), _) => Err(e.clone()),
        _ => Err(format!("this node has no connected mapping of {name}")),
    };
    SmbServer {
        name,
        mapped,
        address,
    }
}

/// The step's recorded name.
pub const STEP: &str = "SMB: NewSmbGlobalMapping of a missing share";

/// Runs the step against `server`, or lists it as not run.
pub(super) async fn run(
    out: &mut super::Outcome,
    connector: &Connector,
    server: Option<&SmbServer>,
) {
    let Some(server) = server else {
        out.not_run(STEP, "not run: needs --smb-server");
        return;
    };
    let t = Instant::now();
    match &server.mapped {
        Ok(m) if m.is_empty() => {}
        Ok(m) => {
            let roots: Vec<&str> = m.iter().map(|(r, _)| r.as_str()).collect();
            out.not_run(
                STEP,
                format!(
                    "not run: this node maps {roots:?} of server {:?}; a mapping without \
                     credentials could answer error 1219, on which the daemon removes that \
                     server's mappings no volume uses; name a server nothing on the node maps",
                    server.name
                ),
            );
            return;
        }
        Err(e) => {
            let _ = out.record::<()>(
                STEP,
                t,
                Err(format!(
                    "refusing server {:?}: the node's mappings cannot be read ({e})",
                    server.name
                )),
            );
            return;
        }
    }
    let root = format!(
        r"\\{}\csi-proxy-selftest-{}",
        server.name,
        std::process::id()
    );
    let mut client = match SmbClient::connect(connector).await {
        Ok(c) => c,
        Err(e) => {
            let _ = out.record::<()>(
                STEP,
                t,
                Err(format!("the daemon's SMB API is not reachable: {e}")),
            );
            return;
        }
    };
    match client.new_mapping(&root, "", "").await {
        Err(s) => {
            let answer = format!(
                "{} ({}; settles ledger row 38)",
                status("NewSmbGlobalMapping", &s),
                encoding(s.message())
            );
            let _ = out.record(STEP, t, Ok(((), answer)));
        }
        Ok(()) => {
            let _ = out.record(
                STEP,
                t,
                Ok((
                    (),
                    format!("{root} was mapped: the server has a share of that name"),
                )),
            );
            let t = Instant::now();
            let r = client
                .remove_mapping(&root)
                .await
                .map(|()| ((), format!("{root} removed")))
                .map_err(|s| status("RemoveSmbGlobalMapping", &s));
            let _ = out.record("clean-up: SMB RemoveSmbGlobalMapping", t, r);
        }
    }
}

/// How the Win32 code reached the daemon, from the `[0x…]` its SMB messages end with: an
/// `HRESULT_FROM_WIN32` (`0x8007xxxx`) is the call failing with it; a bare code came as the
/// method's `ReturnValue` or in the provider's extended error object.
fn encoding(message: &str) -> String {
    let code = message
        .rsplit_once("[0x")
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(hex, _)| u32::from_str_radix(hex, 16).ok());
    match code {
        Some(c) if c & 0xFFFF_0000 == 0x8007_0000 => format!(
            "Windows answered HRESULT_FROM_WIN32({}): the call itself failed",
            c & 0xFFFF
        ),
        Some(c) => format!(
            "Windows answered the bare code {c}: the method's ReturnValue or the provider's \
             extended error object"
        ),
        None => "no Win32 code in the answer".into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_encoding_is_read_from_the_bracketed_code() {
        let e = super::encoding;
        assert!(
            e("NewSmbGlobalMapping x: the share was not found (error 67) [0x80070043]")
                .contains("HRESULT_FROM_WIN32(67)")
        );
        assert!(e("... (error 67) [0x43]").contains("bare code 67"));
        assert_eq!(e("failed"), "no Win32 code in the answer");
    }
}
