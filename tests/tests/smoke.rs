use deposit::*;
use std::time::Duration;

#[test]
fn ring_write_smoke() {
    let b = Device::open(DeviceConfig::new("ring:sm:b", [10, 0, 0, 1]).progress(Progress::Dedicated)).unwrap();
    let a = Device::open(DeviceConfig::new("ring:sm:a", [10, 0, 0, 2])).unwrap();
    let epb = b.alloc_endpoint(1 << 20, Rights::REMOTE_WRITE).unwrap();
    let cqb = b.create_cq(64);
    let l = b.listen(1, &epb, &cqb).unwrap();
    let epa = a.alloc_endpoint(1 << 20, Rights::REMOTE_WRITE).unwrap();
    let cqa = a.create_cq(64);
    let c = a.connect([10, 0, 0, 1], 1, &epa, &cqa).unwrap();
    let s = l.accept(Duration::from_secs(2)).unwrap();
    epa.write(0, b"hello world").unwrap();
    c.post_write(&WriteRequest::from_endpoint(7, &epa, 0, 11, 100).signaled()).unwrap();
    let wc = cqa.wait_one(Duration::from_secs(2)).expect("completion");
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(wc.wr_id, 7);
    let mut buf = [0u8; 11];
    epb.read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello world");
    assert_eq!(s.arrivals(), 1);
    c.post_write(&WriteRequest::from_endpoint(8, &epa, 0, 11, (1 << 20) - 5).signaled()).unwrap();
    let wc = cqa.wait_one(Duration::from_secs(2)).expect("completion");
    assert_eq!(wc.status, WcStatus::RemoteAccessError);
    println!("{:?}", b.stats());
}
