//! The linetrace viewer (skeleton while the decoder is reshaped).
