// Programmatic dependent launch (PDL), put before the kernels that the
// launcher may start with it (`launch_programmatic`, compute capability 9.0+;
// in a plain launch, and below sm_90, these are no-ops):
//   wait_prior()   returns once the previous kernel on the stream has finished
//                  and its writes are visible: nothing an earlier kernel wrote
//                  may be read, and nothing written, before it;
//   launch_next()  lets the next kernel's CTAs be scheduled (they wait in
//                  their own wait_prior());
//   wait_prior_then_release_next()  both, for a kernel with nothing to do
//                  before its inputs are ready.

__device__ __forceinline__ void wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_prior_then_release_next() {
    wait_prior();
    launch_next();
}
