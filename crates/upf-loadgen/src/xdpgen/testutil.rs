//! What the tests of the modules share: templates and root.

use super::Template;
use std::net::Ipv4Addr;

pub(super) fn ul() -> Template {
    Template::uplink_gtpu(
        ([2; 6], [4; 6]),
        Ipv4Addr::new(192, 168, 3, 2),
        Ipv4Addr::new(192, 168, 3, 1),
        0x1000,
        9,
        Ipv4Addr::new(10, 60, 0, 0),
        Ipv4Addr::new(192, 168, 6, 2),
        64,
        1000,
    )
    .unwrap()
}

pub(super) fn dl() -> Template {
    Template::plain(
        ([2; 6], [4; 6]),
        Ipv4Addr::new(10, 128, 0, 1),
        Ipv4Addr::new(192, 168, 6, 2),
        true,
        64,
        4,
    )
    .unwrap()
}
