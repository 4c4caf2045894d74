//! System adapter: the one API version, `v1alpha1`, over [`SystemService`].
//!
//! Enums are sent as their wire numbers, which the core enums carry as discriminants.

use crate::{adapter, unary};
use csi_proxy_api::system::v1alpha1;
use csi_proxy_core::system::SystemService;

adapter!(
    /// `v1alpha1.System`.
    SystemV1alpha1, SystemService, system::v1alpha1::system_server::SystemServer
);
impl v1alpha1::system_server::System for SystemV1alpha1 {
    unary!(system, v1alpha1, get_bios_serial_number, "GetBIOSSerialNumber", GetBiosSerialNumberRequest => GetBiosSerialNumberResponse,
        |svc, r| Ok(v1alpha1::GetBiosSerialNumberResponse { serial_number: svc.get_bios_serial_number()? }));
    unary!(system, v1alpha1, start_service, "StartService", StartServiceRequest => StartServiceResponse,
        |svc, r| svc.start_service(&r.name).map(|()| v1alpha1::StartServiceResponse {}));
    unary!(system, v1alpha1, stop_service, "StopService", StopServiceRequest => StopServiceResponse,
        |svc, r| svc.stop_service(&r.name, r.force).map(|()| v1alpha1::StopServiceResponse {}));
    unary!(system, v1alpha1, get_service, "GetService", GetServiceRequest => GetServiceResponse,
    |svc, r| {
        let info = svc.get_service(&r.name)?;
        Ok(v1alpha1::GetServiceResponse {
            display_name: info.display_name,
            start_type: info.start_type as i32,
            status: info.status as i32,
        })
    });
}
