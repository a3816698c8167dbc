//! Message bodies (placeholder until the IE families land).

use crate::codec::ie_group;

ie_group! {
    pub struct HeartbeatRequest {}
}
ie_group! {
    pub struct HeartbeatResponse {}
}
ie_group! {
    pub struct PfdManagementRequest {}
}
ie_group! {
    pub struct PfdManagementResponse {}
}
ie_group! {
    pub struct AssociationSetupRequest {}
}
ie_group! {
    pub struct AssociationSetupResponse {}
}
ie_group! {
    pub struct AssociationUpdateRequest {}
}
ie_group! {
    pub struct AssociationUpdateResponse {}
}
ie_group! {
    pub struct AssociationReleaseRequest {}
}
ie_group! {
    pub struct AssociationReleaseResponse {}
}
ie_group! {
    pub struct VersionNotSupportedResponse {}
}
ie_group! {
    pub struct NodeReportRequest {}
}
ie_group! {
    pub struct NodeReportResponse {}
}
ie_group! {
    pub struct SessionSetDeletionRequest {}
}
ie_group! {
    pub struct SessionSetDeletionResponse {}
}
ie_group! {
    pub struct SessionEstablishmentRequest {}
}
ie_group! {
    pub struct SessionEstablishmentResponse {}
}
ie_group! {
    pub struct SessionModificationRequest {}
}
ie_group! {
    pub struct SessionModificationResponse {}
}
ie_group! {
    pub struct SessionDeletionRequest {}
}
ie_group! {
    pub struct SessionDeletionResponse {}
}
ie_group! {
    pub struct SessionReportRequest {}
}
ie_group! {
    pub struct SessionReportResponse {}
}
