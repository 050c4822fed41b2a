//! A session's files over the wire (issue 48): the `resource*` commands,
//! resource watches and `@`-mention completions. The filesystem work itself
//! is the shell's ([`fs`]); every rule (which paths a principal may read or
//! write, the limits, the protocol's errors) is decided here.

pub mod fs;
