import csv, gzip, sys
rows = list(csv.reader(gzip.open(sys.argv[1], 'rt')))
hdr = rows[1]; data = [r for r in rows[2:] if len(r) >= len(hdr)]
ix = {h:i for i,h in enumerate(hdr)}
bins = int(sys.argv[2]) if len(sys.argv)>2 else 60
acc=0; start=0; agg=0; marks=[]
for i,r in enumerate(data):
    n=int(r[ix['Warp Stall Sampling (All Samples)']] or 0); agg+=n
    src=r[ix['Source']].strip()
    if any(k in src for k in ('BAR.SYNC','BAR.ARV','HMMA','MUFU.EX2','LDGSTS','STG','LDG','BRA','EXIT','SHFL','LDS','STS','MUFU.RSQ')):
        pass
    if (i+1) % bins == 0 or i == len(data)-1:
        kinds = {}
        for rr in data[start:i+1]:
            op = rr[ix['Source']].strip().split()[0] if rr[ix['Source']].strip() else ''
            if op.startswith('@'): op = rr[ix['Source']].strip().split()[1]
            op=op.split('.')[0]
            kinds[op]=kinds.get(op,0)+1
        top=sorted(kinds.items(), key=lambda x:-x[1])[:6]
        ex = int(data[start][ix['Instructions Executed']] or 0)
        print(f'{start:5d}-{i:5d} samples {agg:6d}  warp-instr@start {ex:8d}  {top}')
        agg=0; start=i+1
