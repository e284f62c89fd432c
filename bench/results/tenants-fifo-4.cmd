sluice fleetsim --seed 1 --policy round_robin,least_request,sluice --replicas 4 --workload tenants,input=300,output=50 --rates 60,120 --requests 3000 --max-in-flight 4 --tenants   # source: 2344cf4
