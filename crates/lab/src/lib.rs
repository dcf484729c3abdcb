//! fjord-lab
