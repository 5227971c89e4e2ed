//! Where a call's time goes: the durations of its named stages, in order, for guardd's debug log
//! and the `finished` audit row (`timings_us`, microseconds per stage).
//!
//! A [`Stages`] keeps one mark; [`Stages::lap`] charges the time since the mark to a stage and
//! moves the mark, so consecutive laps cover the whole path without gaps or overlaps.

use std::{
    borrow::Cow,
    collections::BTreeMap,
    time::{Duration, Instant},
};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, Visitor},
    ser::SerializeMap as _,
};

/// Named stage durations, in the order they were recorded.
#[derive(Clone, Debug)]
pub struct Stages {
    mark: Instant,
    /// Named as guardd named them, or as read back from an audit row.
    laps: Vec<(Cow<'static, str>, Duration)>,
}

impl Default for Stages {
    fn default() -> Self {
        Self::start()
    }
}

impl Stages {
    /// Starts timing now.
    pub fn start() -> Self {
        Self {
            mark: Instant::now(),
            laps: Vec::with_capacity(24),
        }
    }

    /// Charges the time since the last mark to `name` (added to it if it is already there) and
    /// moves the mark to now.
    pub fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.add(name, now - self.mark);
        self.mark = now;
    }

    /// Moves the mark to now without charging anything (the time since was measured elsewhere).
    pub fn skip(&mut self) {
        self.mark = Instant::now();
    }

    /// Adds `d` to `name`, without moving the mark.
    pub fn add(&mut self, name: &'static str, d: Duration) {
        match self.laps.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += d,
            None => self.laps.push((Cow::Borrowed(name), d)),
        }
    }

    /// Appends the laps of `other` (a part of the path timed on its own, e.g. the launch) and
    /// moves the mark to now.
    pub fn absorb(&mut self, other: &Stages) {
        for (name, d) in &other.laps {
            match self.laps.iter_mut().find(|(n, _)| n == name) {
                Some((_, total)) => *total += *d,
                None => self.laps.push((name.clone(), *d)),
            }
        }
        self.skip();
    }

    /// The duration charged to `name`, if any.
    pub fn get(&self, name: &str) -> Option<Duration> {
        self.laps.iter().find(|(n, _)| *n == name).map(|&(_, d)| d)
    }

    /// The sum of all laps.
    pub fn total(&self) -> Duration {
        self.laps.iter().map(|&(_, d)| d).sum()
    }

    /// The laps, in order.
    pub fn laps(&self) -> impl Iterator<Item = (&str, Duration)> {
        self.laps.iter().map(|(n, d)| (n.as_ref(), *d))
    }
}

/// Equal when the same stages took the same microseconds (what an audit row keeps), in any order.
impl PartialEq for Stages {
    fn eq(&self, other: &Self) -> bool {
        let micros = |s: &Self| {
            s.laps()
                .map(|(n, d)| (n.to_owned(), d.as_micros()))
                .collect::<BTreeMap<_, _>>()
        };
        micros(self) == micros(other)
    }
}

/// `{stage: µs}`, in the order the stages were recorded.
impl Serialize for Stages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.laps.len()))?;
        for (name, d) in &self.laps {
            map.serialize_entry(name, &(d.as_micros() as u64))?;
        }
        map.end()
    }
}

/// Read back from `{stage: µs}` (an audit row's `timings_us`), in the row's order.
impl<'de> Deserialize<'de> for Stages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Laps;
        impl<'de> Visitor<'de> for Laps {
            type Value = Stages;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of stage names to microseconds")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Stages, A::Error> {
                let mut stages = Stages::start();
                while let Some((name, us)) = map.next_entry::<String, u64>()? {
                    stages
                        .laps
                        .push((Cow::Owned(name), Duration::from_micros(us)));
                }
                Ok(stages)
            }
        }
        d.deserialize_map(Laps)
    }
}

/// `stage=µs` pairs, for the log.
impl std::fmt::Display for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, d)) in self.laps.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={}", d.as_micros())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_cover_the_path_in_order_and_repeat_into_one() {
        let mut s = Stages::start();
        std::thread::sleep(Duration::from_millis(2));
        s.lap("a");
        s.lap("b");
        std::thread::sleep(Duration::from_millis(1));
        s.lap("a");
        let names: Vec<_> = s.laps().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(s.get("a").expect("a") >= Duration::from_millis(3));
        assert_eq!(s.total(), s.get("a").expect("a") + s.get("b").expect("b"));
    }

    #[test]
    fn absorbed_laps_add_up_and_serialize_as_micros() {
        let mut inner = Stages::start();
        inner.add("fork", Duration::from_micros(120));
        let mut outer = Stages::start();
        outer.add("cgroup", Duration::from_micros(30));
        outer.absorb(&inner);
        outer.add("fork", Duration::from_micros(5));
        let json = serde_json::to_value(&outer).expect("json");
        assert_eq!(json, serde_json::json!({ "cgroup": 30, "fork": 125 }));
        assert_eq!(outer.to_string(), "cgroup=30 fork=125");
        // Read back from a row's text, in the row's order (not sorted).
        let back: Stages = serde_json::from_str(r#"{"slot":3,"cgroup":30}"#).expect("read");
        assert_eq!(back.to_string(), "slot=3 cgroup=30");
    }
}
