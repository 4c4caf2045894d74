//! SMB adapters: one thin struct per API version over [`SmbService`].
//!
//! All four versions have the same requests. v1beta2 and v1 have empty responses; v1alpha1 and
//! v1beta1 responses carry a `string error` that is never set (failures are statuses). One macro
//! serves all four, given the response body.

use crate::{adapter, unary};
use csi_proxy_api::smb::{v1, v1alpha1, v1beta1, v1beta2};
use csi_proxy_core::smb::{NewSmbGlobalMappingRequest, SmbService};

/// The RPCs of every SMB version; `{ $($resp)* }` is the body of both (empty) responses.
macro_rules! smb_rpcs {
    ($v:ident, { $($resp:tt)* }) => {
        unary!(smb, $v, new_smb_global_mapping, "NewSmbGlobalMapping", NewSmbGlobalMappingRequest => NewSmbGlobalMappingResponse,
            on |r| Some(crate::admission::smb_share(&r.remote_path)),
            |svc, r| svc.new_smb_global_mapping(&NewSmbGlobalMappingRequest {
                remote_path: r.remote_path,
                local_path: r.local_path,
                username: r.username,
                password: r.password.into(),
            }).map(|()| $v::NewSmbGlobalMappingResponse { $($resp)* }));
        unary!(smb, $v, remove_smb_global_mapping, "RemoveSmbGlobalMapping", RemoveSmbGlobalMappingRequest => RemoveSmbGlobalMappingResponse,
            on |r| Some(crate::admission::smb_share(&r.remote_path)),
            |svc, r| svc.remove_smb_global_mapping(&r.remote_path)
                .map(|()| $v::RemoveSmbGlobalMappingResponse { $($resp)* }));
    };
}

adapter!(
    /// `v1alpha1.Smb`.
    SmbV1alpha1, SmbService, smb::v1alpha1::smb_server::SmbServer
);
impl v1alpha1::smb_server::Smb for SmbV1alpha1 {
    smb_rpcs!(v1alpha1, { error: String::new() });
}

adapter!(
    /// `v1beta1.Smb`.
    SmbV1beta1, SmbService, smb::v1beta1::smb_server::SmbServer
);
impl v1beta1::smb_server::Smb for SmbV1beta1 {
    smb_rpcs!(v1beta1, { error: String::new() });
}

adapter!(
    /// `v1beta2.Smb`.
    SmbV1beta2, SmbService, smb::v1beta2::smb_server::SmbServer
);
impl v1beta2::smb_server::Smb for SmbV1beta2 {
    smb_rpcs!(v1beta2, {});
}

adapter!(
    /// `v1.Smb`.
    SmbV1, SmbService, smb::v1::smb_server::SmbServer
);
impl v1::smb_server::Smb for SmbV1 {
    smb_rpcs!(v1, {});
}
