//! Allocation of TEIDs, UE addresses and SEIDs.
