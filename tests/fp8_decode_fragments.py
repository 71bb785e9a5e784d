# The FP8 decode kernel's fragment plumbing (attn_decode_kernel<true> in src/backend/cuda/attention.cu),
# emulated lane by lane in Python: the swz8 shared tile written by the cp.async mapping (a bijection,
# and conflict-free for the K 16-byte and V 8-byte reads), the per-lane reads, __byte_perm plus
# cvt.rn.f16x2.e4m3x2 (e4m3 -> fp16, exact; kv_fp8.cuh's e4m3_pick_f16x2), the m16n8k16 A/B/C
# fragment layouts of the PTX ISA, movmatrix.trans, and the output dimension mapping (8g + 2mt, +1).
# Checks S^T = K Q^T (x 2^-4, Q's factor) and O^T = V^T P^T against direct sums for all 4 warps of a
# 64-key chunk. It checks the derivation, not the binary: a change to those index expressions in
# attention.cu must be made here too (tests/gpu/test_attention.cu checks the kernel itself on the
# GPU).
import random, struct
random.seed(1)
def e4m3(c):
    E=(c>>3)&15; m=c&7
    if E==15 and m==7: return float('nan')
    v = m*2.0**-9 if E==0 else (8+m)*2.0**(E-10)
    return -v if c&0x80 else v
def f16(h):
    s=h>>15; e=(h>>10)&31; m=h&1023
    v = m*2.0**-24 if e==0 else (1024+m)*2.0**(e-25)
    return -v if s else v
def halves(w): return f16(w&0xffff), f16(w>>16)
def byte_perm(x,y,s):
    b=[(x>>(8*i))&255 for i in range(4)]+[(y>>(8*i))&255 for i in range(4)]
    r=0
    for i in range(4): r |= b[(s>>(4*i))&7] << (8*i)
    return r
def f16_bits(v): return struct.unpack('<H', struct.pack('<e', v))[0]  # exact for e4m3 values
def cvt(w):  # cvt.rn.f16x2.e4m3x2 of w's low 16 bits: byte 0 -> low half, byte 1 -> high half
    return f16_bits(e4m3(w&255)) | f16_bits(e4m3((w>>8)&255))<<16
def pick(B0,B1,x,y):  # e4m3_pick_f16x2<B0, B1>: its shortcuts for x's halves, else one byte_perm
    if (B0,B1)==(0,1): return cvt(x)
    if (B0,B1)==(2,3): return cvt(x>>16)
    return cvt(byte_perm(x,y,(B1<<4)|B0))
def swz8(r,c):
    line=r>>1; half=(r^line)&1
    return line*128+half*64+((c^(((line>>1)&1)<<1))<<4)
def words(buf,addr,n): return list(struct.unpack_from('<%dI'%n, buf, addr))
# random non-NaN codes
K=[[random.choice([c for c in range(256) if (c&0x7f)!=0x7f]) for d in range(64)] for r in range(64)]
V=[[random.choice([c for c in range(256) if (c&0x7f)!=0x7f]) for d in range(64)] for r in range(64)]
Q=[[random.uniform(-3,3) for d in range(64)] for h in range(8)]
sk=bytearray(4096); sv=bytearray(4096)
# check swz8 is a bijection and the cp.async mapping
seen=set()
for r in range(64):
    for c in range(4):
        a=swz8(r,c); assert a%16==0 and a<4096 and a not in seen; seen.add(a)
        sk[a:a+16]=bytes(K[r][16*c:16*c+16]); sv[a:a+16]=bytes(V[r][16*c:16*c+16])
# bank-conflict check for the V reads (half-warps) and K reads (quarter warps)
for w in range(4):
    for j in range(4):  # which of the four V loads
        for hw in range(2):
            banks={}
            for lane in range(16*hw,16*hw+16):
                g,t=lane>>2,lane&3
                r=w*16+2*t+[0,1,8,9][j]
                a=swz8(r,g>>1)+(g&1)*8
                for b in (a//4%32, a//4%32+1):
                    assert b not in banks or banks[b]==a//128, ('V bank conflict', w,j,lane)
                    banks[b]=a//128
    for j in range(2):
        for q in range(4):
            banks=set()
            for lane in range(8*q,8*q+8):
                g,t=lane>>2,lane&3
                a=swz8(w*16+g+8*j,t)
                for b in range(a//4%32,a//4%32+4):
                    assert b not in banks, 'K bank conflict'; banks.add(b)
maxerr=0
for w in range(4):
    # ---- S^T = K Q^T ----
    Am=[[[0.0]*16 for _ in range(16)] for kc in range(4)]
    Bm=[[[0.0]*8 for _ in range(16)] for kc in range(4)]
    for lane in range(32):
        g,t=lane>>2,lane&3
        X=words(sk,swz8(w*16+g,t),4); Y=words(sk,swz8(w*16+g+8,t),4)
        for kc in range(4):
            ka=[pick(0,1,X[kc],X[kc]),pick(0,1,Y[kc],Y[kc]),pick(2,3,X[kc],X[kc]),pick(2,3,Y[kc],Y[kc])]
            Am[kc][g][2*t],Am[kc][g][2*t+1]=halves(ka[0])
            Am[kc][g+8][2*t],Am[kc][g+8][2*t+1]=halves(ka[1])
            Am[kc][g][2*t+8],Am[kc][g][2*t+9]=halves(ka[2])
            Am[kc][g+8][2*t+8],Am[kc][g+8][2*t+9]=halves(ka[3])
            d0=16*t+4*kc
            Bm[kc][2*t][g],Bm[kc][2*t+1][g]=Q[g][d0]/16,Q[g][d0+1]/16
            Bm[kc][2*t+8][g],Bm[kc][2*t+9][g]=Q[g][d0+2]/16,Q[g][d0+3]/16
    D=[[sum(Am[kc][i][k]*Bm[kc][k][j] for kc in range(4) for k in range(16)) for j in range(8)] for i in range(16)]
    S=[[0.0]*8 for _ in range(16)]
    for lane in range(32):
        g,t=lane>>2,lane&3
        s=[D[g][2*t],D[g][2*t+1],D[g+8][2*t],D[g+8][2*t+1]]
        for idx,(key,head) in enumerate([(g,2*t),(g,2*t+1),(g+8,2*t),(g+8,2*t+1)]):
            ref=sum(e4m3(K[w*16+key][d])*Q[head][d] for d in range(64))
            got=s[idx]*16
            maxerr=max(maxerr,abs(got-ref)); assert abs(got-ref)<1e-9*(1+abs(ref)),(w,lane,idx,got,ref)
            S[key][head]=ref
    # ---- O^T = V^T P^T ----
    P=[[random.uniform(0,1) for h in range(8)] for k in range(16)]
    # lanes hold p0..p3 = P[g][2t], P[g][2t+1], P[g+8][2t], P[g+8][2t+1]; movmatrix.trans of each 8x8 half
    def movtrans(M):  # M[row][col] 8x8 -> lane (g,t) gets (M^T[g][2t], M^T[g][2t+1]) = (M[2t][g], M[2t+1][g])
        return {lane:(M[2*(lane&3)][lane>>2],M[2*(lane&3)+1][lane>>2]) for lane in range(32)}
    pb0=movtrans([P[k] for k in range(8)]); pb1=movtrans([P[k] for k in range(8,16)])
    Bv=[[0.0]*8 for _ in range(16)]
    for lane in range(32):
        g,t=lane>>2,lane&3
        Bv[2*t][g],Bv[2*t+1][g]=pb0[lane]; Bv[2*t+8][g],Bv[2*t+9][g]=pb1[lane]
    for k in range(16):  # B must be P^T
        for h in range(8): assert Bv[k][h]==P[k][h]
    out={}
    for mt in range(4):
        Av=[[0.0]*16 for _ in range(16)]
        for lane in range(32):
            g,t=lane>>2,lane&3
            r0=w*16+2*t; vo=(g&1)*8
            v0=words(sv,swz8(r0,g>>1)+vo,2); v1=words(sv,swz8(r0+1,g>>1)+vo,2)
            v2=words(sv,swz8(r0+8,g>>1)+vo,2); v3=words(sv,swz8(r0+9,g>>1)+vo,2)
            h=0 if mt<2 else 1
            x0,x1,x2,x3=v0[h],v1[h],v2[h],v3[h]
            if mt&1==0: va=[pick(0,4,x0,x1),pick(1,5,x0,x1),pick(0,4,x2,x3),pick(1,5,x2,x3)]
            else: va=[pick(2,6,x0,x1),pick(3,7,x0,x1),pick(2,6,x2,x3),pick(3,7,x2,x3)]
            Av[g][2*t],Av[g][2*t+1]=halves(va[0]); Av[g+8][2*t],Av[g+8][2*t+1]=halves(va[1])
            Av[g][2*t+8],Av[g][2*t+9]=halves(va[2]); Av[g+8][2*t+8],Av[g+8][2*t+9]=halves(va[3])
        D=[[sum(Av[i][k]*Bv[k][j] for k in range(16)) for j in range(8)] for i in range(16)]
        for lane in range(32):
            g,t=lane>>2,lane&3
            acc=[D[g][2*t],D[g][2*t+1],D[g+8][2*t],D[g+8][2*t+1]]
            da=8*g+2*mt; db=da+1
            for idx,(dim,head) in enumerate([(da,2*t),(da,2*t+1),(db,2*t),(db,2*t+1)]):
                ref=sum(e4m3(V[w*16+k][dim])*P[k][head] for k in range(16))
                got=acc[idx]
                assert abs(got-ref)<1e-9*(1+abs(ref)),(w,mt,lane,idx,got,ref)
                assert (dim,head) not in out; out[(dim,head)]=got
    assert len(out)==64*8, len(out)
print('decode fp8 fragment plumbing OK; max |err| %.3g' % maxerr)
