//! The Gated DeltaNet on CUDA: the chunked gated delta rule for prefill and
//! the recurrent step for decode (filled by the GDN work).
