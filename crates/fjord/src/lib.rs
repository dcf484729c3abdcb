//! fjord-fjord
