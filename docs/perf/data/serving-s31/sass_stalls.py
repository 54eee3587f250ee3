import csv, gzip, sys
f = sys.argv[1]
rows = list(csv.reader(gzip.open(f, 'rt')))
hdr = rows[1]; data = rows[2:]
ix = {h:i for i,h in enumerate(hdr)}
stalls = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot = {s:0 for s in stalls}; total=0
recs=[]
for r in data:
    if len(r) < len(hdr): continue
    n = int(r[ix['Warp Stall Sampling (All Samples)']] or 0); total += n
    for s in stalls: tot[s] += int(r[ix[s]] or 0)
    recs.append((n, r[ix['Address']][-5:], r[ix['Source']].strip(), {s:int(r[ix[s]] or 0) for s in stalls}))
print('total samples', total)
for s,v in sorted(tot.items(), key=lambda x:-x[1])[:10]: print(f'  {s:28s} {v:7d} {100*v/total:5.1f}%')
# cumulative by region: print per-instruction with running index
if len(sys.argv) > 2:
    top = int(sys.argv[2])
    for i,(n,a,src,st) in enumerate(recs):
        if n >= top:
            main = sorted(st.items(), key=lambda x:-x[1])[:2]
            print(f'{i:5d} {a} {n:6d} {src[:60]:60s} {main}')
