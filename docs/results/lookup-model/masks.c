// masks: N records of REC octets; per packet read lines RMASK, write lines WMASK, prefetch
// lines PMASK 8 packets ahead (T1), and line 0 of the batch's records first if GRP; env WK:
// rounds of work a packet (default 60; 35 makes 1k cost what the pipeline's 1k costs).
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  long n=atol(argv[1]); long rec=atol(argv[2]); unsigned rm=strtoul(argv[3],0,0), wm=strtoul(argv[4],0,0), pm=strtoul(argv[5],0,0); int grp=atoi(argv[6]);
  int hint = argc>7 ? atoi(argv[7]) : 2; // 2: T1, 3: T0, 0: NTA, 9: prefetchw
  int WK = getenv("WK") ? atoi(getenv("WK")) : 60; // rounds of work a packet
  size_t sz=(size_t)n*rec; sz=(sz+(2<<20)-1)&~((size_t)(2<<20)-1);
  char*b=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  madvise(b,sz,MADV_HUGEPAGE); for(size_t i=0;i<sz;i+=64) b[i]=1;
  const int P=1<<22; uint32_t*idx=malloc(P*4); uint64_t s=88172645463325252ull;
  for(int i=0;i<P;i++){s^=s<<13;s^=s>>7;s^=s<<17; idx[i]=s%n;}
  uint64_t acc=0; double best=1e9;
  #define PF(p) do{ if(hint==9) _m_prefetchw(p); else if(hint==3) _mm_prefetch(p,_MM_HINT_T0); else if(hint==0) _mm_prefetch(p,_MM_HINT_NTA); else _mm_prefetch(p,_MM_HINT_T1);}while(0)
  for(int round=0;round<5;round++){
    double t0=now();
    for(int base=0;base<P;base+=256){
      uint32_t*x=idx+base;
      if(grp) for(int j=0;j<256;j++) PF(b+(size_t)x[j]*rec);
      for(int i=0;i<256;i++){
        if(i+8<256){char*r=b+(size_t)x[i+8]*rec; for(int k=0;k<20;k++) if(pm>>k&1) PF(r+64*k);}
        uint64_t*r=(uint64_t*)(b+(size_t)x[i]*rec);
        uint64_t a=acc,c=i,d=3,e=5;
        for(int k=0;k<20;k++) if(rm>>k&1) a+=r[8*k];
        for(int w=0;w<WK;w++){ c=c*31+a; d^=d<<3^c; e+=d>>5; a+=w; }
        for(int k=0;k<20;k++) if(wm>>k&1) r[8*k]+=c^d^e;
        acc=a;
      }
    }
    double t=(now()-t0)/P*1e9; if(t<best)best=t;
  }
  printf("n=%ld rec=%ld r=%#x w=%#x p=%#x grp=%d hint=%d: %.1f ns/pkt (%lu)\n",n,rec,rm,wm,pm,grp,hint,best,acc&1);
}
