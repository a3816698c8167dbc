// lookup: table (key -> slot, 4 octets a key, shuffled) -> shape + record, as the pipeline
// looks sessions up; d0: table line prefetched 8 packets ahead of its lookup, d1: every table
// line of the batch first, d2: no table (slot = key). usage: ./lookup SESSIONS DESIGN

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void*big(size_t sz){sz=(sz+(2<<20)-1)&~((size_t)(2<<20)-1);void*b=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);madvise(b,sz,MADV_HUGEPAGE);memset(b,0,sz);return b;}
#define REC 1280
int main(int argc,char**argv){
  long n=atol(argv[1]); int d=atoi(argv[2]); int work=argc>3?atoi(argv[3]):60; int ahead=argc>4?atoi(argv[4]):8;
  uint32_t*T=big(n*4); uint32_t*S=big(n*4); char*R=big((size_t)n*REC);
  uint64_t s=88172645463325252ull;
  #define RND() (s^=s<<13,s^=s>>7,s^=s<<17,s)
  for(long i=0;i<n;i++)T[i]=i; for(long i=n-1;i>0;i--){long j=RND()%(i+1);uint32_t t=T[i];T[i]=T[j];T[j]=t;}
  for(long i=0;i<n;i++)S[i]=7;
  const int P=1<<22; uint32_t*key=malloc(P*4); for(int i=0;i<P;i++)key[i]=RND()%n;
  uint32_t slot[256]; uint64_t acc=0; double best=1e9, sum=0;
  for(int round=0;round<5;round++){
    double t0=now();
    for(int base=0;base<P;base+=256){
      uint32_t*k=key+base;
      if(d==0){
        for(int j=0;j<256;j++){ if(j+ahead<256)_mm_prefetch((char*)&T[k[j+ahead]],_MM_HINT_T0);
          uint32_t sl=T[k[j]]; slot[j]=sl; _mm_prefetch((char*)&S[sl],_MM_HINT_T0); _mm_prefetch(R+(size_t)sl*REC,_MM_HINT_T1);}
      } else if(d==1){
        for(int j=0;j<256;j++)_mm_prefetch((char*)&T[k[j]],_MM_HINT_T1);
        for(int j=0;j<256;j++){uint32_t sl=T[k[j]]; slot[j]=sl; _mm_prefetch((char*)&S[sl],_MM_HINT_T1); _mm_prefetch(R+(size_t)sl*REC,_MM_HINT_T1);}
      } else {
        for(int j=0;j<256;j++){uint32_t sl=k[j]; slot[j]=sl; _mm_prefetch((char*)&S[sl],_MM_HINT_T1); _mm_prefetch(R+(size_t)sl*REC,_MM_HINT_T1);}
      }
      for(int i=0;i<256;i++){
        if(i+8<256){char*r=R+(size_t)slot[i+8]*REC; int l=S[slot[i+8]]; for(int q=1;q<l;q++)_mm_prefetch(r+64*q,_MM_HINT_T1);}
        uint64_t*r=(uint64_t*)(R+(size_t)slot[i]*REC);
        uint64_t a=acc,c=i,dd=3,e=5;
        for(int q=0;q<7;q++) a+=r[8*q];
        for(int w=0;w<work;w++){ c=c*31+a; dd^=dd<<3^c; e+=dd>>5; a+=w; }
        r[8*6]+=c^dd^e; acc=a;
      }
    }
    double t=(now()-t0)/P*1e9; if(t<best)best=t; sum+=t;
  }
  printf("n=%ld d=%d ahead=%d: best %.1f mean %.1f ns/pkt (%lu)\n",n,d,ahead,best,sum/5,acc&1);
}
