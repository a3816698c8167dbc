//! What the UPF does with every IE of the rule groups (TS 29.244 §7.5.2, §7.5.4, §7.5.9) and
//! every flag of Apply Action, Reporting Triggers, Measurement Method and Measurement
//! Information: enforced (a named test shows the behaviour), refused (the request is answered
//! with the cause and the Offending IE before anything changes), or still pending (accepted,
//! not yet enforced: listed in docs/compliance.md until it is). An SMF that gets Cause 1 can
//! trust that every rule it sent is in force except what docs/compliance.md lists as pending.
//!
//! docs/compliance.md's enforcement tables are rendered from these tables ([`markdown`]), and
//! the UP Function Features the UPF advertises come from [`FEATURES`].

use crate::reject::Reject;
use upf_pfcp::ie as p;
use upf_pfcp::ie::UpFunctionFeatures;
use upf_pfcp::Cause;

/// What the UPF does with an IE or a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// In force; the test (`path::function`, from the repository root) that shows it.
    Enforced(&'static str),
    /// Refused with this cause (and the IE as Offending IE); why, for the table.
    Refused(Cause, &'static str),
    /// Accepted and not yet enforced: what is missing, and the issue section that adds it.
    /// Allowed only where refusing would break common SMFs, or for responses (which cannot
    /// be refused).
    Pending(&'static str),
}

use Support::{Enforced, Pending, Refused};

const NOT_SUPPORTED: Cause = Cause::SERVICE_NOT_SUPPORTED;

/// The grouped IEs whose children the tables cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    CreatePdr,
    UpdatePdr,
    Pdi,
    CreateFar,
    UpdateFar,
    ForwardingParameters,
    UpdateForwardingParameters,
    DuplicatingParameters,
    UpdateDuplicatingParameters,
    CreateQer,
    UpdateQer,
    CreateUrr,
    UpdateUrr,
    CreateBar,
    UpdateBarSessionModification,
    UpdateBarSessionReportResponse,
}

impl Group {
    pub const ALL: [Group; 16] = [
        Group::CreatePdr,
        Group::UpdatePdr,
        Group::Pdi,
        Group::CreateFar,
        Group::UpdateFar,
        Group::ForwardingParameters,
        Group::UpdateForwardingParameters,
        Group::DuplicatingParameters,
        Group::UpdateDuplicatingParameters,
        Group::CreateQer,
        Group::UpdateQer,
        Group::CreateUrr,
        Group::UpdateUrr,
        Group::CreateBar,
        Group::UpdateBarSessionModification,
        Group::UpdateBarSessionReportResponse,
    ];

    /// (IE type, field name) of every IE the codec decodes in this group.
    pub fn ies(self) -> &'static [(u16, &'static str)] {
        match self {
            Group::CreatePdr => p::CreatePdr::IES,
            Group::UpdatePdr => p::UpdatePdr::IES,
            Group::Pdi => p::Pdi::IES,
            Group::CreateFar => p::CreateFar::IES,
            Group::UpdateFar => p::UpdateFar::IES,
            Group::ForwardingParameters => p::ForwardingParameters::IES,
            Group::UpdateForwardingParameters => p::UpdateForwardingParameters::IES,
            Group::DuplicatingParameters => p::DuplicatingParameters::IES,
            Group::UpdateDuplicatingParameters => p::UpdateDuplicatingParameters::IES,
            Group::CreateQer => p::CreateQer::IES,
            Group::UpdateQer => p::UpdateQer::IES,
            Group::CreateUrr => p::CreateUrr::IES,
            Group::UpdateUrr => p::UpdateUrr::IES,
            Group::CreateBar => p::CreateBar::IES,
            Group::UpdateBarSessionModification => p::UpdateBarSessionModification::IES,
            Group::UpdateBarSessionReportResponse => p::UpdateBarSessionReportResponse::IES,
        }
    }

    /// The name TS 29.244 gives the group.
    pub fn title(self) -> &'static str {
        match self {
            Group::CreatePdr => "Create PDR",
            Group::UpdatePdr => "Update PDR",
            Group::Pdi => "PDI",
            Group::CreateFar => "Create FAR",
            Group::UpdateFar => "Update FAR",
            Group::ForwardingParameters => "Forwarding Parameters",
            Group::UpdateForwardingParameters => "Update Forwarding Parameters",
            Group::DuplicatingParameters => "Duplicating Parameters",
            Group::UpdateDuplicatingParameters => "Update Duplicating Parameters",
            Group::CreateQer => "Create QER",
            Group::UpdateQer => "Update QER",
            Group::CreateUrr => "Create URR",
            Group::UpdateUrr => "Update URR",
            Group::CreateBar => "Create BAR",
            Group::UpdateBarSessionModification => "Update BAR (Session Modification)",
            Group::UpdateBarSessionReportResponse => "Update BAR (Session Report Response)",
        }
    }
}

/// One IE of one group.
#[derive(Debug, Clone, Copy)]
pub struct IeRule {
    pub group: Group,
    pub ie: u16,
    pub support: Support,
}

const fn ie(group: Group, ie: u16, support: Support) -> IeRule {
    IeRule { group, ie, support }
}

/// Every IE of every group. A test fails if an IE the codec decodes is missing here.
pub static IES: &[IeRule] = &{
    use Group::*;
    [
        // Create PDR / Update PDR (§7.5.2.2, §7.5.4.2).
        ie(CreatePdr, 56, Enforced("crates/upf-n4/tests/session.rs::establishment_allocates_and_installs")),
        ie(CreatePdr, 29, Enforced("crates/upf-dataplane/tests/pdr.rs::the_specific_filter_with_the_better_precedence_wins_over_the_catch_all")),
        ie(CreatePdr, 2, Enforced("crates/upf-n4/tests/session.rs::establishment_allocates_and_installs")),
        ie(CreatePdr, 95, Enforced("crates/upf-dataplane/tests/scenario.rs::uplink_decapsulated_to_n6_and_downlink_encapsulated_to_gnb")),
        ie(CreatePdr, 108, Enforced("crates/upf-dataplane/tests/far.rs::forw_both_ways")),
        ie(CreatePdr, 81, Enforced("crates/upf-dataplane/tests/urr.rs::volume_threshold_reports_each_time_it_is_reached")),
        ie(CreatePdr, 109, Enforced("crates/upf-dataplane/tests/qer.rs::session_ambr_shared_by_two_qos_flows_holds_their_sum")),
        ie(CreatePdr, 106, Refused(NOT_SUPPORTED, "no predefined rules are configured")),

        ie(CreatePdr, 163, Refused(NOT_SUPPORTED, "PDR activation times are not implemented")),

        ie(CreatePdr, 164, Refused(NOT_SUPPORTED, "PDR deactivation times are not implemented")),

        ie(UpdatePdr, 56, Enforced("crates/upf-n4/tests/session.rs::remove_urr_returns_its_usage")),
        ie(UpdatePdr, 95, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdatePdr, 29, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdatePdr, 2, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdatePdr, 108, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdatePdr, 81, Enforced("crates/upf-n4/tests/session.rs::remove_urr_returns_its_usage")),
        ie(UpdatePdr, 109, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdatePdr, 106, Refused(NOT_SUPPORTED, "no predefined rules are configured")),

        ie(UpdatePdr, 107, Refused(NOT_SUPPORTED, "no predefined rules are configured")),

        ie(UpdatePdr, 163, Refused(NOT_SUPPORTED, "PDR activation times are not implemented")),

        ie(UpdatePdr, 164, Refused(NOT_SUPPORTED, "PDR deactivation times are not implemented")),

        // PDI (§7.5.2.2-2).
        ie(Pdi, 20, Enforced("crates/upf-dataplane/tests/pdr.rs::a_core_pdr_on_a_tunnel_matches_its_filter_with_the_ue_as_destination")),
        ie(Pdi, 21, Enforced("crates/upf-dataplane/tests/scenario.rs::uplink_decapsulated_to_n6_and_downlink_encapsulated_to_gnb")),
        ie(Pdi, 22, Enforced("crates/upf-dataplane/tests/netinst.rs::a_pdr_of_another_network_instance_does_not_match")),
        ie(Pdi, 93, Enforced("crates/upf-dataplane/tests/scenario.rs::ipv6_ue_uplink_and_downlink")),
        ie(Pdi, 23, Enforced("crates/upf-dataplane/tests/pdr.rs::tos_traffic_class_filter_matches_under_its_mask")),
        ie(Pdi, 24, Refused(NOT_SUPPORTED, "no application detection (PFDs are not applied)")),

        ie(Pdi, 142, Refused(NOT_SUPPORTED, "no Ethernet PDU sessions")),

        ie(Pdi, 124, Enforced("crates/upf-dataplane/tests/pdr.rs::a_qfi_in_the_pdi_matches_only_g_pdus_carrying_it")),
        ie(Pdi, 153, Enforced("crates/upf-dataplane/tests/properties.rs::the_pipeline_chooses_the_pdr_the_reference_chooses")),
        ie(Pdi, 154, Refused(NOT_SUPPORTED, "Framed-Routing is not implemented")),

        ie(Pdi, 155, Enforced("crates/upf-dataplane/tests/properties.rs::the_pipeline_chooses_the_pdr_the_reference_chooses")),
        ie(Pdi, 160, Enforced("crates/upf-dataplane/tests/scenario.rs::interface_types_choose_the_n9_side")),

        // Create FAR / Update FAR (§7.5.2.3, §7.5.4.3).
        ie(CreateFar, 108, Enforced("crates/upf-dataplane/tests/far.rs::forw_both_ways")),
        ie(CreateFar, 44, Enforced("crates/upf-dataplane/tests/far.rs::forw_both_ways")),
        ie(CreateFar, 4, Enforced("crates/upf-dataplane/tests/scenario.rs::uplink_decapsulated_to_n6_and_downlink_encapsulated_to_gnb")),
        ie(CreateFar, 5, Enforced("crates/upf-dataplane/tests/far.rs::dupl_sends_a_copy_to_the_duplication_target")),
        ie(CreateFar, 88, Enforced("crates/upf-dataplane/tests/far.rs::buffer_overflow_is_buffer_full")),
        ie(UpdateFar, 108, Enforced("crates/upf-dataplane/tests/far.rs::drop_both_ways")),
        ie(UpdateFar, 44, Enforced("crates/upf-dataplane/tests/far.rs::drop_both_ways")),
        ie(UpdateFar, 11, Enforced("crates/upf-dataplane/tests/far.rs::buff_without_nocp_buffers_silently_and_releases_in_order")),
        ie(UpdateFar, 105, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateFar, 88, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateFar, 4, Enforced("crates/upf-n4/tests/support.rs::omec_forwarding_parameters_in_an_update_far")),
        ie(ForwardingParameters, 42, Enforced("crates/upf-dataplane/tests/scenario.rs::uplink_decapsulated_to_n6_and_downlink_encapsulated_to_gnb")),
        ie(ForwardingParameters, 22, Enforced("crates/upf-dataplane/tests/netinst.rs::uplink_leaves_by_the_n6_of_its_fars_instance")),
        ie(ForwardingParameters, 38, Refused(NOT_SUPPORTED, "redirection is not implemented")),

        ie(ForwardingParameters, 84, Enforced("crates/upf-dataplane/tests/scenario.rs::downlink_gtpu_ipv4_to_the_gnb_exactly")),
        ie(ForwardingParameters, 30, Enforced("crates/upf-dataplane/tests/scenario.rs::transport_level_marking_sets_the_outer_dscp_and_ecn_is_copied")),
        ie(ForwardingParameters, 41, Refused(NOT_SUPPORTED, "no forwarding policies are configured")),

        ie(ForwardingParameters, 98, Refused(NOT_SUPPORTED, "header enrichment is not implemented")),

        ie(ForwardingParameters, 137, Refused(NOT_SUPPORTED, "ARP/ND proxying is not implemented")),

        ie(ForwardingParameters, 160, Enforced("crates/upf-dataplane/tests/scenario.rs::interface_types_choose_the_n9_side")),

        ie(UpdateForwardingParameters, 42, Enforced("crates/upf-dataplane/tests/far.rs::buff_without_nocp_buffers_silently_and_releases_in_order")),
        ie(UpdateForwardingParameters, 22, Enforced("crates/upf-dataplane/tests/netinst.rs::a_network_instance_changed_by_update_forwarding_parameters_moves_the_uplink")),
        ie(UpdateForwardingParameters, 38, Refused(NOT_SUPPORTED, "redirection is not implemented")),

        ie(UpdateForwardingParameters, 84, Enforced("crates/upf-dataplane/tests/modify.rs::sndem_sends_an_end_marker_down_the_old_tunnel_before_the_new_traffic")),
        ie(UpdateForwardingParameters, 30, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateForwardingParameters, 41, Refused(NOT_SUPPORTED, "no forwarding policies are configured")),

        ie(UpdateForwardingParameters, 98, Refused(NOT_SUPPORTED, "header enrichment is not implemented")),

        ie(UpdateForwardingParameters, 49, Enforced("crates/upf-dataplane/tests/modify.rs::sndem_in_the_update_forwarding_parameters_is_honoured")),
        ie(UpdateForwardingParameters, 160, Enforced("crates/upf-dataplane/tests/scenario.rs::interface_types_choose_the_n9_side")),

        ie(DuplicatingParameters, 42, Enforced("crates/upf-dataplane/tests/far.rs::dupl_sends_a_copy_to_the_duplication_target")),
        ie(DuplicatingParameters, 84, Enforced("crates/upf-dataplane/tests/far.rs::dupl_sends_a_copy_to_the_duplication_target")),
        ie(DuplicatingParameters, 30, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(DuplicatingParameters, 41, Refused(NOT_SUPPORTED, "no forwarding policies are configured")),

        ie(UpdateDuplicatingParameters, 42, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateDuplicatingParameters, 84, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateDuplicatingParameters, 30, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateDuplicatingParameters, 41, Refused(NOT_SUPPORTED, "no forwarding policies are configured")),

        // Create QER / Update QER (§7.5.2.5, §7.5.4.5).
        ie(CreateQer, 109, Enforced("crates/upf-dataplane/tests/qer.rs::closed_gates_drop_per_direction")),
        ie(CreateQer, 28, Enforced("crates/upf-dataplane/tests/shared.rs::qers_with_one_correlation_id_share_their_aggregate_across_workers")),

        ie(CreateQer, 25, Enforced("crates/upf-dataplane/tests/qer.rs::closed_gates_drop_per_direction")),
        ie(CreateQer, 26, Enforced("crates/upf-dataplane/tests/qer.rs::mbr_holds_each_direction_to_its_rate_after_the_burst")),
        ie(CreateQer, 27, Pending("in force in the priority modes: a GBR flow is served first and keeps its GBR within 5 % at twice its worker's capacity (crates/upf/tests/e2e.rs::gbr; the XDP engine leaves GBR sessions to the workers); not in fifo mode, the default (issue #28)")),

        ie(CreateQer, 94, Enforced("crates/upf-dataplane/tests/qer.rs::packet_rate_passes_n_then_drops_and_refills")),
        ie(CreateQer, 124, Enforced("crates/upf-dataplane/tests/scenario.rs::downlink_psc_carries_the_qers_qfi_rqi_and_ppi")),
        ie(CreateQer, 123, Enforced("crates/upf-dataplane/tests/scenario.rs::downlink_psc_carries_the_qers_qfi_rqi_and_ppi")),
        ie(CreateQer, 158, Enforced("crates/upf-dataplane/tests/scenario.rs::downlink_psc_carries_the_qers_qfi_rqi_and_ppi")),
        ie(CreateQer, 157, Enforced("crates/upf-dataplane/tests/urr.rs::mbr_and_usage_ignore_packets_dropped_for_ttl")),
        ie(UpdateQer, 109, Enforced("crates/upf-dataplane/tests/qer.rs::closed_gates_drop_per_direction")),
        ie(UpdateQer, 28, Enforced("crates/upf-n4/tests/session.rs::a_correlation_id_is_one_aggregate_per_smf_while_sessions_use_it")),

        ie(UpdateQer, 25, Enforced("crates/upf-dataplane/tests/qer.rs::closed_gates_drop_per_direction")),
        ie(UpdateQer, 26, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateQer, 27, Pending("in force in the priority modes: a GBR flow is served first and keeps its GBR within 5 % at twice its worker's capacity (crates/upf/tests/e2e.rs::gbr; the XDP engine leaves GBR sessions to the workers); not in fifo mode, the default (issue #28)")),

        ie(UpdateQer, 94, Enforced("crates/upf-dataplane/tests/qer.rs::an_update_qer_changes_the_packet_rate_keeping_what_is_left")),
        ie(UpdateQer, 124, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateQer, 123, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateQer, 158, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateQer, 157, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        // Create URR / Update URR (§7.5.2.4, §7.5.4.4).
        ie(CreateUrr, 81, Enforced("crates/upf-dataplane/tests/urr.rs::deletion_reports_exact_volumes_of_what_was_forwarded")),
        ie(CreateUrr, 62, Enforced("crates/upf-n4/tests/support.rs::measurement_method_decides_what_is_reported")),
        ie(CreateUrr, 37, Enforced("crates/upf-dataplane/tests/urr.rs::periodic_reports_every_measurement_period")),
        ie(CreateUrr, 64, Enforced("crates/upf-dataplane/tests/urr.rs::periodic_reports_every_measurement_period")),
        ie(CreateUrr, 31, Enforced("crates/upf-dataplane/tests/urr.rs::volume_threshold_reports_each_time_it_is_reached")),
        ie(CreateUrr, 73, Enforced("crates/upf-dataplane/tests/urr.rs::volume_quota_reports_then_drops_until_a_new_grant")),
        ie(CreateUrr, 32, Enforced("crates/upf-dataplane/tests/urr.rs::time_threshold_counts_usage_time_with_an_inactivity_detection_time_else_the_wall_clock")),
        ie(CreateUrr, 74, Enforced("crates/upf-dataplane/tests/urr.rs::time_quota_counts_usage_time_under_an_inactivity_detection_time")),
        ie(CreateUrr, 71, Enforced("crates/upf-dataplane/src/usage.rs::quota_holding_time_reports_idleness_once")),
        ie(CreateUrr, 72, Enforced("crates/upf-dataplane/tests/urr.rs::dropped_dl_traffic_threshold_reports_droth")),

        ie(CreateUrr, 181, Enforced("crates/upf-dataplane/src/usage.rs::quota_validity_time_reports_the_grant_expired_once")),
        ie(CreateUrr, 33, Enforced("crates/upf-dataplane/tests/urr.rs::usage_before_and_after_the_monitoring_time_in_a_query_and_the_deletion")),

        ie(CreateUrr, 34, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(CreateUrr, 35, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(CreateUrr, 121, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(CreateUrr, 122, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(CreateUrr, 36, Enforced("crates/upf-dataplane/tests/urr.rs::inactivity_detection_time_measures_usage_time_and_stop_of_traffic")),

        ie(CreateUrr, 82, Enforced("crates/upf-dataplane/tests/urr.rs::linked_urrs_with_liusa_report_in_the_same_message")),

        ie(CreateUrr, 100, Enforced("crates/upf-dataplane/src/usage.rs::threshold_then_quota")),
        ie(CreateUrr, 108, Enforced("crates/upf-dataplane/tests/urr.rs::far_id_for_quota_action_applies_that_far_until_a_new_grant")),

        ie(CreateUrr, 182, Enforced("crates/upf-dataplane/tests/urr.rs::number_of_reports_limits_the_reports_of_a_urr")),

        ie(UpdateUrr, 81, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateUrr, 62, Enforced("crates/upf-n4/tests/support.rs::measurement_method_decides_what_is_reported")),
        ie(UpdateUrr, 37, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateUrr, 64, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateUrr, 31, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateUrr, 73, Enforced("crates/upf-dataplane/tests/urr.rs::volume_quota_reports_then_drops_until_a_new_grant")),
        ie(UpdateUrr, 32, Enforced("crates/upf-dataplane/tests/urr.rs::time_threshold_counts_usage_time_with_an_inactivity_detection_time_else_the_wall_clock")),
        ie(UpdateUrr, 74, Enforced("crates/upf-dataplane/tests/urr.rs::time_quota_counts_usage_time_under_an_inactivity_detection_time")),
        ie(UpdateUrr, 71, Enforced("crates/upf-dataplane/src/usage.rs::quota_holding_time_reports_idleness_once")),
        ie(UpdateUrr, 72, Enforced("crates/upf-dataplane/tests/urr.rs::dropped_dl_traffic_threshold_reports_droth")),

        ie(UpdateUrr, 181, Enforced("crates/upf-dataplane/src/usage.rs::quota_validity_time_reports_the_grant_expired_once")),
        ie(UpdateUrr, 33, Enforced("crates/upf-dataplane/tests/urr.rs::usage_before_and_after_the_monitoring_time_in_a_query_and_the_deletion")),

        ie(UpdateUrr, 34, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(UpdateUrr, 35, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(UpdateUrr, 121, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(UpdateUrr, 122, Enforced("crates/upf-dataplane/tests/urr.rs::monitoring_time_splits_the_usage_and_subsequent_limits_take_over")),

        ie(UpdateUrr, 36, Enforced("crates/upf-dataplane/tests/urr.rs::inactivity_detection_time_measures_usage_time_and_stop_of_traffic")),

        ie(UpdateUrr, 82, Enforced("crates/upf-dataplane/tests/urr.rs::linked_urrs_with_liusa_report_in_the_same_message")),

        ie(UpdateUrr, 100, Enforced("crates/upf-dataplane/src/usage.rs::threshold_then_quota")),
        ie(UpdateUrr, 108, Enforced("crates/upf-dataplane/tests/urr.rs::far_id_for_quota_action_applies_that_far_until_a_new_grant")),

        ie(UpdateUrr, 182, Enforced("crates/upf-dataplane/tests/urr.rs::number_of_reports_limits_the_reports_of_a_urr")),

        // BAR (§7.5.2.6, §7.5.4.11, §7.5.9.2).
        ie(CreateBar, 88, Enforced("crates/upf-dataplane/tests/far.rs::buffer_overflow_is_buffer_full")),
        ie(CreateBar, 46, Enforced("crates/upf-dataplane/tests/far.rs::the_bar_notification_delay_holds_the_report_back")),

        ie(CreateBar, 140, Enforced("crates/upf-dataplane/tests/far.rs::buffer_overflow_is_buffer_full")),
        ie(UpdateBarSessionModification, 88, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateBarSessionModification, 46, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),

        ie(UpdateBarSessionModification, 140, Enforced("crates/upf-n4/tests/support.rs::updates_reach_the_installed_session")),
        ie(UpdateBarSessionReportResponse, 88, Enforced("crates/upf-n4/tests/support.rs::update_bar_in_a_report_response_applies_to_its_bar")),
        ie(UpdateBarSessionReportResponse, 46, Enforced("crates/upf-n4/tests/support.rs::update_bar_in_a_report_response_applies_to_its_bar")),

        ie(UpdateBarSessionReportResponse, 47, Enforced("crates/upf-dataplane/tests/far.rs::extended_buffering_keeps_packets_for_the_dl_buffering_duration")),

        ie(UpdateBarSessionReportResponse, 48, Enforced("crates/upf-dataplane/tests/far.rs::extended_buffering_keeps_packets_for_the_dl_buffering_duration")),

        ie(UpdateBarSessionReportResponse, 140, Enforced("crates/upf-n4/tests/support.rs::update_bar_in_a_report_response_applies_to_its_bar")),
    ]
};

/// Every flag of the flag-valued IEs. A test fails if a flag the codec knows is missing.
pub static FLAGS: &[FlagRule] = &{
    use FlagIe::*;
    const LATER: &str = "not implemented yet (issue #26 §2)";
    [
        flag(ApplyAction, "DROP", Enforced("crates/upf-dataplane/tests/far.rs::drop_both_ways")),
        flag(ApplyAction, "FORW", Enforced("crates/upf-dataplane/tests/far.rs::forw_both_ways")),
        flag(ApplyAction, "BUFF", Enforced("crates/upf-dataplane/tests/far.rs::buff_without_nocp_buffers_silently_and_releases_in_order")),
        flag(ApplyAction, "NOCP", Enforced("crates/upf-dataplane/tests/far.rs::buff_nocp_reports_once_per_buffering_period")),
        flag(ApplyAction, "DUPL", Enforced("crates/upf-dataplane/tests/far.rs::dupl_sends_a_copy_to_the_duplication_target")),
        flag(ApplyAction, "IPMA", Refused(NOT_SUPPORTED, "no IP multicast")),
        flag(ApplyAction, "IPMD", Refused(NOT_SUPPORTED, "no IP multicast")),
        flag(ApplyAction, "DFRT", Refused(NOT_SUPPORTED, "no redundant transmission")),
        flag(ApplyAction, "EDRT", Refused(NOT_SUPPORTED, "no redundant transmission")),
        flag(ApplyAction, "BDPN", Refused(NOT_SUPPORTED, "buffered DL packet notification is not implemented")),
        flag(ApplyAction, "DDPN", Refused(NOT_SUPPORTED, "discarded DL packet notification is not implemented")),
        flag(ApplyAction, "FSSM", Refused(NOT_SUPPORTED, "no MBS sessions")),
        flag(ApplyAction, "MBSU", Refused(NOT_SUPPORTED, "no MBS sessions")),
        flag(ReportingTriggers, "PERIO", Enforced("crates/upf-dataplane/tests/urr.rs::periodic_reports_every_measurement_period")),
        flag(ReportingTriggers, "VOLTH", Enforced("crates/upf-dataplane/tests/urr.rs::volume_threshold_reports_each_time_it_is_reached")),
        flag(ReportingTriggers, "TIMTH", Enforced("crates/upf-dataplane/tests/urr.rs::time_threshold_counts_usage_time_with_an_inactivity_detection_time_else_the_wall_clock")),
        flag(ReportingTriggers, "QUHTI", Enforced("crates/upf-dataplane/src/usage.rs::quota_holding_time_reports_idleness_once")),
        flag(ReportingTriggers, "START", Enforced("crates/upf-dataplane/tests/urr.rs::start_of_traffic_and_a_quota_reached_by_the_same_packet_are_both_reported")),
        flag(ReportingTriggers, "STOPT", Enforced("crates/upf-dataplane/tests/urr.rs::inactivity_detection_time_measures_usage_time_and_stop_of_traffic")),
        flag(ReportingTriggers, "DROTH", Enforced("crates/upf-dataplane/tests/urr.rs::dropped_dl_traffic_threshold_reports_droth")),
        flag(ReportingTriggers, "LIUSA", Enforced("crates/upf-dataplane/tests/urr.rs::linked_urrs_with_liusa_report_in_the_same_message")),
        flag(ReportingTriggers, "VOLQU", Enforced("crates/upf-dataplane/tests/urr.rs::volume_quota_reports_then_drops_until_a_new_grant")),
        flag(ReportingTriggers, "TIMQU", Enforced("crates/upf-dataplane/tests/urr.rs::time_quota_counts_usage_time_under_an_inactivity_detection_time")),
        flag(ReportingTriggers, "ENVCL", Refused(NOT_SUPPORTED, "no envelope reporting")),
        flag(ReportingTriggers, "MACAR", Refused(NOT_SUPPORTED, "no Ethernet PDU sessions")),
        flag(ReportingTriggers, "EVETH", Refused(NOT_SUPPORTED, "no event measurement")),
        flag(ReportingTriggers, "EVEQU", Refused(NOT_SUPPORTED, "no event measurement")),
        flag(ReportingTriggers, "IPMJL", Refused(NOT_SUPPORTED, "no IP multicast")),
        flag(ReportingTriggers, "QUVTI", Enforced("crates/upf-dataplane/src/usage.rs::quota_validity_time_reports_the_grant_expired_once")),
        flag(ReportingTriggers, "REEMR", Refused(NOT_SUPPORTED, "end marker reception reports are not implemented")),
        flag(ReportingTriggers, "UPINT", Refused(NOT_SUPPORTED, LATER)),
        flag(MeasurementMethod, "DURAT", Enforced("crates/upf-n4/tests/support.rs::measurement_method_decides_what_is_reported")),
        flag(MeasurementMethod, "VOLUM", Enforced("crates/upf-n4/tests/support.rs::measurement_method_decides_what_is_reported")),
        flag(MeasurementMethod, "EVENT", Refused(NOT_SUPPORTED, "no event measurement")),
        flag(MeasurementInformation, "MBQE", Enforced("crates/upf-dataplane/tests/urr.rs::mbqe_measures_before_qos_enforcement")),
        flag(MeasurementInformation, "INAM", Refused(NOT_SUPPORTED, LATER)),
        flag(MeasurementInformation, "RADI", Refused(NOT_SUPPORTED, "no application detection")),
        flag(MeasurementInformation, "ISTM", Refused(NOT_SUPPORTED, LATER)),
        flag(MeasurementInformation, "MNOP", Enforced("crates/upf-dataplane/src/usage.rs::threshold_then_quota")),
        flag(MeasurementInformation, "SSPOC", Refused(NOT_SUPPORTED, "no ATSSS steering")),
        flag(MeasurementInformation, "ASPOC", Refused(NOT_SUPPORTED, "no ATSSS steering")),
        flag(MeasurementInformation, "CIAM", Refused(NOT_SUPPORTED, "no CIoT")),
    ]
};

/// The flag-valued IEs whose bits the tables cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlagIe {
    ApplyAction,
    ReportingTriggers,
    MeasurementMethod,
    MeasurementInformation,
}

impl FlagIe {
    pub const ALL: [FlagIe; 4] = [
        FlagIe::ApplyAction,
        FlagIe::ReportingTriggers,
        FlagIe::MeasurementMethod,
        FlagIe::MeasurementInformation,
    ];

    /// The IE type.
    pub fn ie(self) -> u16 {
        match self {
            FlagIe::ApplyAction => 44,
            FlagIe::ReportingTriggers => 37,
            FlagIe::MeasurementMethod => 62,
            FlagIe::MeasurementInformation => 100,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            FlagIe::ApplyAction => "Apply Action",
            FlagIe::ReportingTriggers => "Reporting Triggers",
            FlagIe::MeasurementMethod => "Measurement Method",
            FlagIe::MeasurementInformation => "Measurement Information",
        }
    }

    /// (name, bit) of every flag the codec knows.
    pub fn flags(self) -> Vec<(&'static str, u32)> {
        fn all<F: bitflags::Flags>() -> Vec<(&'static str, u32)>
        where
            F::Bits: Into<u32>,
        {
            F::FLAGS
                .iter()
                .map(|f| (f.name(), f.value().bits().into()))
                .collect()
        }
        match self {
            FlagIe::ApplyAction => all::<p::ApplyAction>(),
            FlagIe::ReportingTriggers => all::<p::ReportingTriggers>(),
            FlagIe::MeasurementMethod => all::<p::MeasurementMethod>(),
            FlagIe::MeasurementInformation => all::<p::MeasurementInformation>(),
        }
    }
}

/// One flag of one flag-valued IE.
#[derive(Debug, Clone, Copy)]
pub struct FlagRule {
    pub ie: FlagIe,
    pub flag: &'static str,
    pub support: Support,
}

const fn flag(ie: FlagIe, flag: &'static str, support: Support) -> FlagRule {
    FlagRule { ie, flag, support }
}

/// What the tables say of IE `ie` in `group` (None: not in the tables, which a test forbids).
pub fn lookup(group: Group, ie: u16) -> Option<Support> {
    IES.iter()
        .find(|r| r.group == group && r.ie == ie)
        .map(|r| r.support)
}

fn flag_support(ie: FlagIe, name: &str) -> Option<Support> {
    FLAGS
        .iter()
        .find(|r| r.ie == ie && r.flag == name)
        .map(|r| r.support)
}

/// Refuses the first present IE of `group` the table refuses.
fn check_group(group: Group, each: impl FnOnce(&mut dyn FnMut(u16))) -> Result<(), Reject> {
    let mut refused = None;
    each(&mut |ie| {
        if refused.is_none() {
            if let Some(Refused(cause, why)) = lookup(group, ie) {
                refused = Some(Reject::new(cause, why).ie(ie));
            }
        }
    });
    refused.map_or(Ok(()), Err)
}

/// Refuses a flag-valued IE with a flag set that the table refuses (or does not know).
fn check_flags(ie: FlagIe, bits: u32) -> Result<(), Reject> {
    for (name, bit) in ie.flags() {
        if bits & bit != 0 {
            if let Some(Refused(cause, why)) = flag_support(ie, name) {
                return Err(Reject::new(cause, why).ie(ie.ie()));
            }
        }
    }
    Ok(())
}

pub(crate) fn create_pdr(c: &p::CreatePdr) -> Result<(), Reject> {
    check_group(Group::CreatePdr, |f| c.for_each_present(f))?;
    check_group(Group::Pdi, |f| c.pdi.for_each_present(f))
}

pub(crate) fn update_pdr(u: &p::UpdatePdr) -> Result<(), Reject> {
    check_group(Group::UpdatePdr, |f| u.for_each_present(f))?;
    match &u.pdi {
        Some(d) => check_group(Group::Pdi, |f| d.for_each_present(f)),
        None => Ok(()),
    }
}

pub(crate) fn create_far(c: &p::CreateFar) -> Result<(), Reject> {
    check_group(Group::CreateFar, |f| c.for_each_present(f))?;
    check_flags(FlagIe::ApplyAction, c.apply_action.bits().into())?;
    if let Some(fw) = &c.forwarding_parameters {
        check_group(Group::ForwardingParameters, |f| fw.for_each_present(f))?;
    }
    for d in c.duplicating_parameters.iter() {
        check_group(Group::DuplicatingParameters, |f| d.for_each_present(f))?;
    }
    Ok(())
}

pub(crate) fn update_far(u: &p::UpdateFar) -> Result<(), Reject> {
    check_group(Group::UpdateFar, |f| u.for_each_present(f))?;
    if let Some(a) = u.apply_action {
        check_flags(FlagIe::ApplyAction, a.bits().into())?;
    }
    if let Some(fw) = &u.update_forwarding_parameters {
        check_group(Group::UpdateForwardingParameters, |f| {
            fw.for_each_present(f)
        })?;
    }
    if let Some(fw) = &u.forwarding_parameters {
        check_group(Group::ForwardingParameters, |f| fw.for_each_present(f))?;
    }
    for d in u.update_duplicating_parameters.iter() {
        check_group(Group::UpdateDuplicatingParameters, |f| {
            d.for_each_present(f)
        })?;
    }
    Ok(())
}

pub(crate) fn create_qer(c: &p::CreateQer) -> Result<(), Reject> {
    check_group(Group::CreateQer, |f| c.for_each_present(f))?;
    check_packet_rate(c.packet_rate)
}

pub(crate) fn update_qer(u: &p::UpdateQer) -> Result<(), Reject> {
    check_group(Group::UpdateQer, |f| u.for_each_present(f))?;
    check_packet_rate(u.packet_rate)
}

/// Packet Rate (IE 94) is enforced, but not its additional rates (APRC, §8.2.68): they let
/// exception reports (TS 23.401 §4.7.7.3) pass beyond the rate, and the data path cannot
/// tell an exception report from any other packet.
fn check_packet_rate(r: Option<p::PacketRate>) -> Result<(), Reject> {
    match r {
        Some(r) if r.additional_uplink.is_some() || r.additional_downlink.is_some() => {
            Err(Reject::new(
                NOT_SUPPORTED,
                "additional packet rates for exception reports",
            )
            .ie(PACKET_RATE))
        }
        _ => Ok(()),
    }
}

const PACKET_RATE: u16 = 94;

pub(crate) fn create_urr(c: &p::CreateUrr) -> Result<(), Reject> {
    check_group(Group::CreateUrr, |f| c.for_each_present(f))?;
    check_flags(
        FlagIe::MeasurementMethod,
        c.measurement_method.bits().into(),
    )?;
    check_flags(FlagIe::ReportingTriggers, c.reporting_triggers.bits())?;
    if let Some(i) = c.measurement_information {
        check_flags(FlagIe::MeasurementInformation, i.bits().into())?;
    }
    Ok(())
}

pub(crate) fn update_urr(u: &p::UpdateUrr) -> Result<(), Reject> {
    check_group(Group::UpdateUrr, |f| u.for_each_present(f))?;
    if let Some(m) = u.measurement_method {
        check_flags(FlagIe::MeasurementMethod, m.bits().into())?;
    }
    if let Some(t) = u.reporting_triggers {
        check_flags(FlagIe::ReportingTriggers, t.bits())?;
    }
    if let Some(i) = u.measurement_information {
        check_flags(FlagIe::MeasurementInformation, i.bits().into())?;
    }
    Ok(())
}

pub(crate) fn create_bar(c: &p::CreateBar) -> Result<(), Reject> {
    check_group(Group::CreateBar, |f| c.for_each_present(f))
}

pub(crate) fn update_bar(u: &p::UpdateBarSessionModification) -> Result<(), Reject> {
    check_group(Group::UpdateBarSessionModification, |f| {
        u.for_each_present(f)
    })
}

/// The UP Function Features (TS 29.244 §8.2.25) the UPF implements, each with the test that
/// shows it; advertised in every Association Setup.
pub static FEATURES: &[(UpFunctionFeatures, &str, &str)] = &[
    (
        UpFunctionFeatures::FTUP,
        "F-TEID allocation (CHOOSE, CHOOSE ID)",
        "crates/upf-n4/tests/session.rs::establishment_allocates_and_installs",
    ),
    (
        UpFunctionFeatures::UEIP,
        "UE IP address allocation (CHV4, CHV6)",
        "crates/upf-n4/tests/session.rs::establishment_allocates_and_installs",
    ),
    (
        UpFunctionFeatures::EMPU,
        "End Marker packets sent on the old path (SNDEM)",
        "crates/upf-dataplane/tests/modify.rs::sndem_sends_an_end_marker_down_the_old_tunnel_before_the_new_traffic",
    ),
    (
        UpFunctionFeatures::MNOP,
        "packet counts in every usage report",
        "crates/upf-dataplane/src/usage.rs::threshold_then_quota",
    ),
];

/// The features to advertise.
pub fn features() -> UpFunctionFeatures {
    FEATURES
        .iter()
        .fold(UpFunctionFeatures::empty(), |a, (f, _, _)| a.union(*f))
}

fn cell(s: Support) -> (String, String) {
    match s {
        Enforced(test) => ("enforced".into(), format!("`{test}`")),
        Refused(cause, why) => (format!("refused, cause {}", cause.0), why.into()),
        Pending(what) => ("**pending**".into(), what.into()),
    }
}

/// docs/compliance.md's enforcement tables.
pub fn markdown() -> String {
    let mut out = String::new();
    for g in Group::ALL {
        out.push_str(&format!(
            "\n#### {}\n\n| IE | type | what the UPF does | shown by, or why |\n|---|---|---|---|\n",
            g.title()
        ));
        for &(code, _) in g.ies() {
            let (what, why) = lookup(g, code).map_or(("?".into(), String::new()), cell);
            out.push_str(&format!(
                "| {} | {code} | {what} | {why} |\n",
                p::type_name(code)
            ));
        }
    }
    for f in FlagIe::ALL {
        out.push_str(&format!(
            "\n#### {} flags\n\n| flag | what the UPF does | shown by, or why |\n|---|---|---|\n",
            f.title()
        ));
        for (name, _) in f.flags() {
            let (what, why) = flag_support(f, name).map_or(("?".into(), String::new()), cell);
            out.push_str(&format!("| {name} | {what} | {why} |\n"));
        }
    }
    out.push_str(
        "\n#### UP Function Features advertised\n\n| feature | what | shown by |\n|---|---|---|\n",
    );
    for (f, what, test) in FEATURES {
        let name = f
            .names()
            .first()
            .map_or_else(|| "?".into(), |n| n.to_string());
        out.push_str(&format!("| {name} | {what} | `{test}` |\n"));
    }
    out
}
