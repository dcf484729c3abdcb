use super::*;

#[test]
fn the_example_spec_parses() {
    let config: LinkConfig = "delay=20ms,jitter=2ms,loss=5%,rate=100mbit"
        .parse()
        .unwrap();
    assert_eq!(config.delay, Duration::from_millis(20));
    assert_eq!(config.jitter, Duration::from_millis(2));
    assert_eq!(config.loss, Probability::new(0.05).unwrap());
    assert_eq!(config.rate_bits_per_sec, Some(100_000_000));
    assert_eq!(config.queue_limit, QueueLimit::default());
}

#[test]
fn every_key_parses() {
    let config: LinkConfig = "delay=1.5ms, jitter=250us, jitter-order=reorder, loss=0.01, \
         ge=1%/25%/90%/0.1%, rate=2.5gbit, queue=500, queue-bytes=375kb, reorder=2%/3ms, dup=0.5%, seed=99"
        .parse()
        .unwrap();
    assert_eq!(config.delay, Duration::from_micros(1500));
    assert_eq!(config.jitter, Duration::from_micros(250));
    assert_eq!(config.jitter_order, JitterOrder::Reorder);
    assert_eq!(config.loss.value(), 0.01);
    let ge = config.gilbert_elliott.unwrap();
    assert_eq!((ge.p.value(), ge.r.value()), (0.01, 0.25));
    assert_eq!(
        (ge.loss_in_bad.value(), ge.loss_in_good.value()),
        (0.9, 0.001)
    );
    assert_eq!(config.rate_bits_per_sec, Some(2_500_000_000));
    assert_eq!(
        config.queue_limit,
        QueueLimit {
            packets: Some(500),
            bytes: Some(375_000)
        }
    );
    let reorder = config.reorder.unwrap();
    assert_eq!(reorder.probability.value(), 0.02);
    assert_eq!(reorder.extra_delay, Duration::from_millis(3));
    assert_eq!(config.duplicate.value(), 0.005);
    assert_eq!(config.seed, 99);
}

#[test]
fn defaults_fill_what_is_left_out() {
    assert_eq!("".parse::<LinkConfig>().unwrap(), LinkConfig::default());
    let config: LinkConfig = "reorder=1%,ge=1%/30%".parse().unwrap();
    assert_eq!(config.reorder.unwrap().extra_delay, DEFAULT_REORDER_DELAY);
    assert_eq!(
        config.gilbert_elliott.unwrap().loss_in_bad,
        Probability::ONE
    );
    let bytes_only: LinkConfig = "rate=10mbit,queue-bytes=1mb".parse().unwrap();
    assert_eq!(
        bytes_only.queue_limit,
        QueueLimit {
            packets: None,
            bytes: Some(1_000_000)
        }
    );
}

#[test]
fn errors_say_what_is_wrong_and_list_valid_keys() {
    let error = "delay=20ms,latency=5ms".parse::<LinkConfig>().unwrap_err();
    assert_eq!(error, SpecError::UnknownKey("latency".into()));
    let text = error.to_string();
    assert!(
        text.contains("latency") && text.contains("delay, jitter"),
        "{text}"
    );

    let error = "delay=20".parse::<LinkConfig>().unwrap_err();
    assert!(error.to_string().contains("expected a duration"), "{error}");
    assert!(matches!(
        "rate=100mbps".parse::<LinkConfig>(),
        Err(SpecError::BadValue { .. })
    ));
    assert!(matches!(
        "loss=150%".parse::<LinkConfig>(),
        Err(SpecError::BadValue { .. })
    ));
    assert!(matches!(
        "loss".parse::<LinkConfig>(),
        Err(SpecError::MissingValue(_))
    ));
    assert!(matches!(
        "loss=1%,loss=2%".parse::<LinkConfig>(),
        Err(SpecError::RepeatedKey { .. })
    ));
    assert!(matches!(
        "rate=0bit".parse::<LinkConfig>(),
        Err(SpecError::Invalid(ConfigError::ZeroRate))
    ));
    assert!(matches!(
        "delay=-5ms".parse::<LinkConfig>(),
        Err(SpecError::BadValue { .. })
    ));
}

#[test]
fn display_is_canonical_and_parses_back() {
    for spec in [
        "",
        "delay=20ms,jitter=2ms,loss=5%,rate=100mbit",
        "delay=1500us,jitter=7ns,jitter-order=reorder,loss=0.3%,ge=1%/25%/100%/0%,\
         rate=1234567bit,queue=none,queue-bytes=64000,reorder=2%/3ms,duplicate=1%,seed=3",
        "rate=1gbit,queue=20",
        "loss=0.123456789",
    ] {
        let config: LinkConfig = spec.parse().unwrap();
        let written = config.to_string();
        assert_eq!(
            written.parse::<LinkConfig>().unwrap(),
            config,
            "{spec} → {written}"
        );
    }
    let config: LinkConfig = "loss=5%,delay=20ms".parse().unwrap();
    assert_eq!(config.to_string(), "delay=20ms,loss=5%");
}
