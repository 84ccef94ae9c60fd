#!/usr/bin/env python3
"""SQS under a pipeline's concurrency: is every message sent received? Not part of `make test`.

Starts a moto server (the executable given: `.venv/bin/punctual-moto`, or moto's own
`moto_server`) on a free loopback port, sends N messages in batches of ten from S threads while
R threads receive ten at a time and delete what they received, then counts: sent (answered
success), received (distinct bodies), lost, and messages left on the queue after every thread has
stopped (in flight = received, deleted, and back: a delete undone by a concurrent one). Bounded:
it stops when the senders are done and the queue reads empty for 3 s.

    .venv/bin/python tools/moto/stress_sqs.py EXE [N=10000] [S=8] [R=10]
"""
import os
import socket
import subprocess
import sys
import threading
import time

import boto3
args = sys.argv[1:] + [None] * 4
exe = args[0]
n, senders, receivers = (int(a or d) for a, d in zip(args[1:4], (10000, 8, 10)))
s = socket.socket(); s.bind(("127.0.0.1",0)); port=s.getsockname()[1]; s.close()
p=subprocess.Popen([exe,"-H","127.0.0.1","-p",str(port)],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
url=f"http://127.0.0.1:{port}"
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1",port),0.2).close(); break
    except OSError: time.sleep(0.1)
mk=lambda: boto3.client("sqs",endpoint_url=url,region_name="us-east-1",aws_access_key_id="x",aws_secret_access_key="x")
q=mk().create_queue(QueueName="stress")["QueueUrl"]
sent=set(); got=set(); lock=threading.Lock(); done_sending=threading.Event()
def sender(k):
    c=mk(); i=k
    while i*10 < n:
        ids=[f"m{i*10+j}" for j in range(10)]
        r=c.send_message_batch(QueueUrl=q,Entries=[{"Id":str(j),"MessageBody":b} for j,b in enumerate(ids)])
        with lock:
            for e in r.get("Successful",[]): sent.add(ids[int(e["Id"])])
        i+=senders
def receiver():
    c=mk(); idle=0
    while True:
        r=c.receive_message(QueueUrl=q,MaxNumberOfMessages=10,WaitTimeSeconds=1,VisibilityTimeout=60)
        ms=r.get("Messages",[])
        if not ms:
            if done_sending.is_set():
                idle+=1
                if idle>=3: return
            continue
        idle=0
        with lock:
            for m in ms: got.add(m["Body"])
        c.delete_message_batch(QueueUrl=q,Entries=[{"Id":str(j),"ReceiptHandle":m["ReceiptHandle"]} for j,m in enumerate(ms)])
t0=time.time()
ts=[threading.Thread(target=sender,args=(k,)) for k in range(senders)]
rs=[threading.Thread(target=receiver) for _ in range(receivers)]
for t in rs+ts: t.start()
for t in ts: t.join()
done_sending.set()
for t in rs: t.join()
attrs=mk().get_queue_attributes(QueueUrl=q,AttributeNames=["All"])["Attributes"]
p.terminate(); p.wait()
print(f"{os.path.basename(exe)}: sent {len(sent)} received {len(got)} lost {len(sent-got)} left_visible {attrs['ApproximateNumberOfMessages']} inflight {attrs['ApproximateNumberOfMessagesNotVisible']} in {time.time()-t0:.0f}s")
