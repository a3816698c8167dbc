//! upf
