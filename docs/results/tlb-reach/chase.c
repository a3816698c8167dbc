#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
// Random pointer chase, one line per step, over a SIZE MiB buffer: every line of it
// (PERPAGE 0), or one line in each 4 KiB page (PERPAGE 1); guest huge pages or not.
// gcc -O2 -o chase chase.c && ./chase SIZE_MIB HUGE(0|1) PERPAGE(0|1)
int main(int argc,char**argv){
  size_t sz=strtoull(argv[1],0,10)<<20; int huge=atoi(argv[2]); int perpage=atoi(argv[3]);
  char*b=mmap(0,sz+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  b=(char*)(((uintptr_t)b+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
  madvise(b,sz,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE);
  size_t stride=perpage?4096:64; size_t n=sz/stride;
  size_t*idx=malloc(n*sizeof(size_t)); for(size_t i=0;i<n;i++)idx[i]=i;
  srand(1); for(size_t i=n-1;i>0;i--){size_t j=((size_t)rand()*RAND_MAX+rand())%(i+1);size_t t=idx[i];idx[i]=idx[j];idx[j]=t;}
  for(size_t i=0;i<n;i++){ *(char**)(b+idx[i]*stride+ (perpage? (idx[i]%64)*64:0))=b+idx[(i+1)%n]*stride+(perpage?(idx[(i+1)%n]%64)*64:0);}
  char*p=b+idx[0]*stride+(perpage?(idx[0]%64)*64:0); long steps=20000000;
  for(long i=0;i<1000000;i++)p=*(char**)p;
  struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long i=0;i<steps;i++)p=*(char**)p;
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double ns=((t1.tv_sec-t0.tv_sec)*1e9+(t1.tv_nsec-t0.tv_nsec))/steps;
  printf("%zuMB huge=%d perpage=%d %.1f ns %p\n",sz>>20,huge,perpage,ns,(void*)p);
}
