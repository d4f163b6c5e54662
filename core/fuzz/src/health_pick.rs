//! Which `health::parse` function the `health_parse` target's first byte picks; shared
//! with seeds.rs so a seed reaches the parser it was written for.

pub const MOUNTS: u8 = 0;
pub const SINFO: u8 = 1;
pub const GRES: u8 = 2;
pub const PORT_RATE: u8 = 3;
pub const LINK_SPEED: u8 = 4;
pub const PORT_STATE: u8 = 5;
pub const COUNTER: u8 = 6;
pub const BOOT_ID: u8 = 7;
/// How many there are: the target takes the first byte modulo this.
pub const COUNT: u8 = 8;
