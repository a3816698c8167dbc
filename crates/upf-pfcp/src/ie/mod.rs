//! Every information element, one module per family (TS 29.244 §8.2). Grouped IEs are
//! defined with `ie_group!` next to the IEs they hold.

mod types;
pub use types::type_name;

pub mod bar;
pub mod common;
pub mod far;
pub mod node;
pub mod pdr;
pub mod qer;
pub mod urr;

pub use bar::*;
pub use common::*;
pub use far::*;
pub use node::*;
pub use pdr::*;
pub use qer::*;
pub use urr::*;
