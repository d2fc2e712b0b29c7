// Ends what cuda/prelude/metal_stdlib began: after the .metal file, the Metal keywords and
// vector constructors stop being macros, so the generated wrappers are plain CUDA.
#undef kernel
#undef device
#undef constant
#undef threadgroup
#undef thread
#undef inline
#undef float4
#undef ushort4
#undef half4
#undef uint2
#undef ulong2
