//! Message bodies, TS 29.244 §7.4 (node messages) and §7.5 (session messages). Each body is a
//! group of IEs; `Message` in `message.rs` ties each to its message type.

use crate::cause::Cause;
use crate::codec::{ie_group, IeValue};
use crate::error::DecodeError;
use crate::ie::*;
use crate::tlv::Reader;

/// TS 29.244 §8.2.66 PFCP Association Release Request (IE 111): SARR asks the SMF to release
/// the association; URSS says non-zero usage reports of released sessions will be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct AssociationReleaseFlags {
    pub sarr: bool,
    pub urss: bool,
}

impl IeValue for AssociationReleaseFlags {
    fn decode(value: &[u8]) -> Result<Self, DecodeError> {
        let f = Reader::new(value).u8()?;
        Ok(Self {
            sarr: f & 0x01 != 0,
            urss: f & 0x02 != 0,
        })
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.sarr) | (u8::from(self.urss) << 1));
    }
}

// ---- Node related messages, §7.4 ----

ie_group! {
    /// §7.4.2.1 Heartbeat Request.
    pub struct HeartbeatRequest {
        recovery_time_stamp: M RecoveryTimeStamp = 96,
        source_ip_address: O SourceIpAddress = 192,
    }
}

ie_group! {
    /// §7.4.2.2 Heartbeat Response.
    pub struct HeartbeatResponse {
        recovery_time_stamp: M RecoveryTimeStamp = 96,
    }
}

ie_group! {
    /// §7.4.3.1 PFD Management Request.
    pub struct PfdManagementRequest {
        application_ids_pfds: V ApplicationIdsPfds = 58,
        node_id: O NodeId = 60,
    }
}

ie_group! {
    /// §7.4.3.2 PFD Management Response.
    pub struct PfdManagementResponse {
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
        node_id: O NodeId = 60,
    }
}

ie_group! {
    /// §7.4.4.1 Association Setup Request.
    pub struct AssociationSetupRequest {
        node_id: M NodeId = 60,
        recovery_time_stamp: M RecoveryTimeStamp = 96,
        up_function_features: O UpFunctionFeatures = 43,
        cp_function_features: O CpFunctionFeatures = 89,
        user_plane_ip_resource_information: V UserPlaneIpResourceInformation = 116,
        alternative_smf_ip_addresses: V AlternativeSmfIpAddress = 178,
        smf_set_id: O SmfSetId = 180,
        pfcp_session_retention_information: O PfcpSessionRetentionInformation = 183,
        ue_ip_address_pool_information: V UeIpAddressPoolInformation = 233,
        pfcpasreq_flags: O PfcpAsReqFlags = 259,
    }
}

ie_group! {
    /// §7.4.4.2 Association Setup Response.
    pub struct AssociationSetupResponse {
        node_id: M NodeId = 60,
        cause: M Cause = 19,
        recovery_time_stamp: M RecoveryTimeStamp = 96,
        up_function_features: O UpFunctionFeatures = 43,
        cp_function_features: O CpFunctionFeatures = 89,
        user_plane_ip_resource_information: V UserPlaneIpResourceInformation = 116,
        alternative_smf_ip_addresses: V AlternativeSmfIpAddress = 178,
        smf_set_id: O SmfSetId = 180,
        pfcpasrsp_flags: O PfcpAsRspFlags = 184,
        ue_ip_address_pool_information: V UeIpAddressPoolInformation = 233,
    }
}

ie_group! {
    /// §7.4.4.3 Association Update Request.
    pub struct AssociationUpdateRequest {
        node_id: M NodeId = 60,
        up_function_features: O UpFunctionFeatures = 43,
        cp_function_features: O CpFunctionFeatures = 89,
        pfcp_association_release_request: O AssociationReleaseFlags = 111,
        graceful_release_period: O GracefulReleasePeriod = 112,
        user_plane_ip_resource_information: V UserPlaneIpResourceInformation = 116,
        pfcpaureq_flags: O PfcpAuReqFlags = 162,
        alternative_smf_ip_addresses: V AlternativeSmfIpAddress = 178,
        smf_set_id: O SmfSetId = 180,
        ue_ip_address_pool_information: V UeIpAddressPoolInformation = 233,
    }
}

ie_group! {
    /// §7.4.4.4 Association Update Response.
    pub struct AssociationUpdateResponse {
        node_id: M NodeId = 60,
        cause: M Cause = 19,
        up_function_features: O UpFunctionFeatures = 43,
        cp_function_features: O CpFunctionFeatures = 89,
        ue_ip_address_pool_information: V UeIpAddressPoolInformation = 233,
    }
}

ie_group! {
    /// §7.4.4.5 Association Release Request.
    pub struct AssociationReleaseRequest {
        node_id: M NodeId = 60,
    }
}

ie_group! {
    /// §7.4.4.6 Association Release Response.
    pub struct AssociationReleaseResponse {
        node_id: M NodeId = 60,
        cause: M Cause = 19,
    }
}

ie_group! {
    /// §7.4.4.7 Version Not Supported Response: header only.
    pub struct VersionNotSupportedResponse {}
}

ie_group! {
    /// §7.4.5.1 Node Report Request.
    pub struct NodeReportRequest {
        node_id: M NodeId = 60,
        node_report_type: M NodeReportType = 101,
        user_plane_path_failure_report: O UserPlanePathFailureReport = 102,
        user_plane_path_recovery_report: O UserPlanePathRecoveryReport = 187,
    }
}

ie_group! {
    /// §7.4.5.2 Node Report Response.
    pub struct NodeReportResponse {
        node_id: M NodeId = 60,
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
    }
}

ie_group! {
    /// §7.4.6.1 Session Set Deletion Request (FQ-CSIDs of the failed SGW-C/PGW-C/SMF…).
    pub struct SessionSetDeletionRequest {
        node_id: M NodeId = 60,
        fq_csids: V FqCsid = 65,
    }
}

ie_group! {
    /// §7.4.6.2 Session Set Deletion Response.
    pub struct SessionSetDeletionResponse {
        node_id: M NodeId = 60,
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
    }
}

// ---- Session related messages, §7.5 ----

ie_group! {
    /// §7.5.2 Session Establishment Request. At least one Create PDR and Create FAR are
    /// mandatory; the agent checks that (the codec accepts an empty list).
    pub struct SessionEstablishmentRequest {
        node_id: M NodeId = 60,
        cp_f_seid: M FSeid = 57,
        create_pdrs: V CreatePdr = 1,
        create_fars: V CreateFar = 3,
        create_urrs: V CreateUrr = 6,
        create_qers: V CreateQer = 7,
        create_bar: O CreateBar = 85,
        pdn_type: O PdnType = 113,
        fq_csids: V FqCsid = 65,
        user_plane_inactivity_timer: O UserPlaneInactivityTimer = 117,
        user_id: O UserId = 141,
        apn_dnn: O ApnDnn = 159,
        pfcpsereq_flags: O PfcpSeReqFlags = 186,
        s_nssai: O SNssai = 257,
        recovery_time_stamp: O RecoveryTimeStamp = 96,
    }
}

ie_group! {
    /// §7.5.3 Session Establishment Response.
    pub struct SessionEstablishmentResponse {
        node_id: M NodeId = 60,
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
        up_f_seid: O FSeid = 57,
        created_pdrs: V CreatedPdr = 8,
        load_control_information: O LoadControlInformation = 51,
        overload_control_information: O OverloadControlInformation = 54,
        fq_csids: V FqCsid = 65,
        failed_rule_id: O FailedRuleId = 114,
    }
}

ie_group! {
    /// §7.5.4 Session Modification Request.
    pub struct SessionModificationRequest {
        cp_f_seid: O FSeid = 57,
        remove_pdrs: V RemovePdr = 15,
        remove_fars: V RemoveFar = 16,
        remove_urrs: V RemoveUrr = 17,
        remove_qers: V RemoveQer = 18,
        remove_bar: O RemoveBar = 87,
        create_pdrs: V CreatePdr = 1,
        create_fars: V CreateFar = 3,
        create_urrs: V CreateUrr = 6,
        create_qers: V CreateQer = 7,
        create_bar: O CreateBar = 85,
        update_pdrs: V UpdatePdr = 9,
        update_fars: V UpdateFar = 10,
        update_urrs: V UpdateUrr = 13,
        update_qers: V UpdateQer = 14,
        update_bar: O UpdateBarSessionModification = 86,
        pfcpsmreq_flags: O PfcpSmReqFlags = 49,
        query_urrs: V QueryUrr = 77,
        fq_csids: V FqCsid = 65,
        user_plane_inactivity_timer: O UserPlaneInactivityTimer = 117,
        query_urr_reference: O QueryUrrReference = 125,
    }
}

ie_group! {
    /// §7.5.5 Session Modification Response.
    pub struct SessionModificationResponse {
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
        created_pdrs: V CreatedPdr = 8,
        load_control_information: O LoadControlInformation = 51,
        overload_control_information: O OverloadControlInformation = 54,
        usage_reports: V UsageReport = 78,
        failed_rule_id: O FailedRuleId = 114,
        updated_pdrs: V UpdatedPdr = 256,
    }
}

ie_group! {
    /// §7.5.6 Session Deletion Request: header (SEID) only in the releases SMFs use.
    pub struct SessionDeletionRequest {}
}

ie_group! {
    /// §7.5.7 Session Deletion Response.
    pub struct SessionDeletionResponse {
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
        load_control_information: O LoadControlInformation = 51,
        overload_control_information: O OverloadControlInformation = 54,
        usage_reports: V UsageReport = 79,
    }
}

ie_group! {
    /// §7.5.8 Session Report Request (sent by the UP function).
    pub struct SessionReportRequest {
        report_type: M ReportType = 39,
        downlink_data_report: O DownlinkDataReport = 83,
        usage_reports: V UsageReport = 80,
        error_indication_report: O ErrorIndicationReport = 99,
        load_control_information: O LoadControlInformation = 51,
        overload_control_information: O OverloadControlInformation = 54,
        pfcpsrreq_flags: O PfcpSrReqFlags = 161,
        old_cp_f_seid: O FSeid = 57,
    }
}

ie_group! {
    /// §7.5.9 Session Report Response.
    pub struct SessionReportResponse {
        cause: M Cause = 19,
        offending_ie: O OffendingIe = 40,
        update_bar: O UpdateBarSessionReportResponse = 12,
        pfcpsrrsp_flags: O PfcpSrRspFlags = 50,
        cp_f_seid: O FSeid = 57,
        alternative_smf_ip_address: O AlternativeSmfIpAddress = 178,
    }
}
