//! fjord-net
