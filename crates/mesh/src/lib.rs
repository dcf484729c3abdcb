//! fjord-mesh
