// records: one random record a packet (its head prefetched for the whole batch first, its
// other lines 8 packets ahead), dummy work; ns a packet by record size and count.
// usage: ./records SESSIONS RECORD_OCTETS LINES WORK [GROUP=1] [PER_PAGE=0] [AHEAD=8]
// AHEAD: packets ahead of its use that a record's lines are prefetched. Hints (env H for the
// lines ahead, HG for the batch's heads): 2 prefetcht1 (default), 3 prefetcht0, 9 prefetchw.
// PER_PAGE > 0: that many records at the start of each 4 KiB page, so that none crosses one.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>
static int H=2, HG=2;
#define PFH(p,h) do{ if((h)==9) _m_prefetchw(p); else if((h)==3) _mm_prefetch((char*)(p),_MM_HINT_T0); else _mm_prefetch((char*)(p),_MM_HINT_T1);}while(0)
static long PER=0, REC=0;
#define ADDR(v) (PER ? (size_t)(v)/PER*4096 + (size_t)(v)%PER*REC : (size_t)(v)*REC)
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  long n=atol(argv[1]); long rec=atol(argv[2]); int lines=atoi(argv[3]); int work=atoi(argv[4]);
  int grp = argc>5 ? atoi(argv[5]) : 1; PER = argc>6 ? atol(argv[6]) : 0; REC=rec;
  int D = argc>7 ? atoi(argv[7]) : 8; if(getenv("H"))H=atoi(getenv("H")); if(getenv("HG"))HG=atoi(getenv("HG"));
  if(PER*rec>4096){fprintf(stderr,"PER_PAGE x RECORD_OCTETS must fit 4096\n");return 1;}
  size_t sz = PER ? (size_t)(n/PER+1)*4096 : (size_t)n*rec; sz=(sz+(2<<20)-1)&~((size_t)(2<<20)-1);
  char*b=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  madvise(b,sz,MADV_HUGEPAGE); memset(b,1,sz);
  const int P=1<<22; uint32_t*idx=malloc(P*4); uint64_t s=88172645463325252ull;
  for(int i=0;i<P;i++){s^=s<<13;s^=s>>7;s^=s<<17; idx[i]=s%n;}
  uint64_t acc=0; double best=1e9;
  for(int round=0;round<5;round++){
    double t0=now();
    for(int base=0;base<P;base+=256){
      uint32_t*x=idx+base;
      if(grp) for(int j=0;j<256;j++) PFH(b+ADDR(x[j]),HG);
      for(int i=0;i<256;i++){
        if(i+D<256){char*r=b+ADDR(x[i+D]); if(!grp)PFH(r,H); for(int k=1;k<lines;k++)PFH(r+64*k,H);}
        uint64_t*r=(uint64_t*)(b+ADDR(x[i]));
        uint64_t a=acc,c=i,d=3,e=5;
        for(int k=0;k<lines;k++) a+=r[8*k];
        for(int w=0;w<work;w++){ c=c*31+a; d^=d<<3^c; e+=d>>5; a+=w; }
        r[8*(lines-1)]+=c^d^e; acc=a;
      }
    }
    double t=(now()-t0)/P*1e9; if(t<best)best=t;
  }
  printf("n=%ld rec=%ld lines=%d work=%d grp=%d per=%ld: %.1f ns/pkt (%lu)\n",n,rec,lines,work,grp,PER,best,acc&1);
}
