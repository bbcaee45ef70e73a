/* Internal interface of kernels/ (the executor side) for the rest of libacx. */
#ifndef ACXK_KERNELS_H
#define ACXK_KERNELS_H
/* 1 when this build has the CUDA device kind. */
int acxk_have_cuda(void);
#endif
