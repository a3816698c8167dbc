#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
// Pointer chase over N lines, each in its own 4 KiB page (a random page of its own
// SIZE/N region, a random line of it), of a SIZE MiB buffer, guest huge pages or not.
// Lines few enough to stay in L2: the time a step above ~3 ns is the TLB miss.
// gcc -O2 -o tlb tlb.c && ./tlb SIZE_MIB HUGE(0|1) N
int main(int argc,char**argv){
  size_t sz=strtoull(argv[1],0,10)<<20; int huge=atoi(argv[2]); size_t n=strtoull(argv[3],0,10);
  char*b=mmap(0,sz+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  b=(char*)(((uintptr_t)b+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
  madvise(b,sz,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE);
  for(size_t i=0;i<sz;i+=4096)b[i]=1;
  size_t gap=sz/n;
  size_t*idx=malloc(n*sizeof(size_t)); for(size_t i=0;i<n;i++)idx[i]=i;
  srand(1); for(size_t i=n-1;i>0;i--){size_t j=((size_t)rand()*RAND_MAX+rand())%(i+1);size_t t=idx[i];idx[i]=idx[j];idx[j]=t;}
#define A(k) (b+idx[k]*gap+((idx[k]*2654435761u)%(gap/4096))*4096+((idx[k]*7)%64)*64)
  for(size_t i=0;i<n;i++) *(char**)A(i)=A((i+1)%n);
  char*p=A(0); long steps=20000000;
  for(long i=0;i<2000000;i++)p=*(char**)p;
  struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long i=0;i<steps;i++)p=*(char**)p;
  clock_gettime(CLOCK_MONOTONIC,&t1);
  printf("%zuMB huge=%d lines=%zu gap=%zuK %.1f ns %p\n",sz>>20,huge,n,gap>>10,((t1.tv_sec-t0.tv_sec)*1e9+(t1.tv_nsec-t0.tv_nsec))/steps,(void*)p);
}
