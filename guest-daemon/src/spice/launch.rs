//! When to start a session agent for the served session that has none (docs/desktops.md#an-agent-in-every-session).
//!
//! Pure decisions, no I/O: [`LaunchPlan`] is told the served session (seat0's active local x11/wayland session of
//! class user or greeter, [`super::logind::target_session`]), which agents are connected and for which session,
//! and the outcome of each launch; it answers whether a launch is due, for which session, and when to look again.
//! [`super::launch_io`] carries the requests out through the root-only launcher socket.
//!
//! The rules:
//! - a session is launched for only after it has been served without any agent for [`LaunchPolicy::grace`]
//!   (the desktop's own autostart — XDG autostart, `graphical-session.target` — usually wins that race);
//! - never while an agent of that session is connected, and never for a session that is not the served one;
//! - after a launch, the next one for the same session waits [`LaunchPolicy::backoff`] × 2^(launches−1)
//!   (capped at [`LaunchPolicy::max_backoff`]), whatever happened in between (an agent that starts and
//!   crashes is not restarted in a tight loop), and after [`LaunchPolicy::max_launches`] the session gets no more;
//!   after a launch the launcher reported as started, at least [`LaunchPolicy::settle`] (an agent on a slow,
//!   loaded guest may take that long to connect);
//! - at most one launch is in flight at a time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::router::AgentId;

/// Timing of the launches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPolicy {
    /// How long a served session must be without an agent before one is launched.
    pub grace: Duration,
    /// Wait after the first launch for a session before the next one.
    pub backoff: Duration,
    /// Upper bound of the doubling back-off.
    pub max_backoff: Duration,
    /// Launches per session, at most.
    pub max_launches: u32,
    /// After a launch reported as started, how long the agent has to connect before the next one.
    pub settle: Duration,
}

impl Default for LaunchPolicy {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(5),
            backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(600),
            max_launches: 5,
            settle: Duration::from_secs(120),
        }
    }
}

/// Most sessions remembered (their launch counts); the oldest are forgotten beyond it.
const MAX_RECORDS: usize = 64;

/// What is known of one session's launches.
#[derive(Debug, Clone)]
struct Record {
    launches: u32,
    /// Earliest time of the next launch.
    next_at: Instant,
    /// Last time the session was the served one (to forget the oldest records).
    seen: Instant,
}

/// The launch decisions (see the module doc).
#[derive(Debug)]
pub struct LaunchPlan {
    policy: LaunchPolicy,
    served: Option<String>,
    /// Connected agents and their logind session.
    agents: HashMap<AgentId, String>,
    records: HashMap<String, Record>,
    /// The session a launch is in flight for.
    in_flight: Option<String>,
}

impl LaunchPlan {
    /// A plan with no served session and no agent.
    pub fn new(policy: LaunchPolicy) -> Self {
        Self {
            policy,
            served: None,
            agents: HashMap::new(),
            records: HashMap::new(),
            in_flight: None,
        }
    }

    /// The back-off after the `launches`-th launch.
    fn backoff(&self, launches: u32) -> Duration {
        let doublings = launches.saturating_sub(1).min(16);
        self.policy
            .backoff
            .saturating_mul(1 << doublings)
            .min(self.policy.max_backoff)
    }

    fn has_agent(&self, session: &str) -> bool {
        self.agents.values().any(|s| s == session)
    }

    /// (Re)starts the grace period of the served session if it has no agent: the launch is due no earlier than
    /// `now + grace`, nor than its back-off allows.
    fn arm(&mut self, now: Instant) {
        let Some(s) = self.served.clone() else {
            return;
        };
        if self.has_agent(&s) {
            return;
        }
        let grace = now + self.policy.grace;
        let r = self.records.entry(s).or_insert(Record {
            launches: 0,
            next_at: grace,
            seen: now,
        });
        r.seen = now;
        r.next_at = r.next_at.max(grace);
        if self.records.len() > MAX_RECORDS {
            let served = self.served.clone();
            if let Some(oldest) = self
                .records
                .iter()
                .filter(|(k, _)| Some(*k) != served.as_ref())
                .min_by_key(|(_, r)| r.seen)
                .map(|(k, _)| k.clone())
            {
                self.records.remove(&oldest);
            }
        }
    }

    /// The served session changed (`None`: none is served).
    pub fn set_served(&mut self, session: Option<&str>, now: Instant) {
        if self.served.as_deref() == session {
            return;
        }
        self.served = session.map(str::to_owned);
        self.arm(now);
    }

    /// An agent of `session` connected.
    pub fn agent_connected(&mut self, id: AgentId, session: &str) {
        self.agents.insert(id, session.to_owned());
    }

    /// Agent `id` is gone; if it served the served session, the grace period starts again.
    pub fn agent_gone(&mut self, id: AgentId, now: Instant) {
        if self.agents.remove(&id).is_some() {
            self.arm(now);
        }
    }

    /// When [`Self::due`] may next answer a session (`None`: not before something changes).
    pub fn next_check(&self) -> Option<Instant> {
        let s = self.served.as_deref()?;
        if self.in_flight.is_some() || self.has_agent(s) {
            return None;
        }
        let r = self.records.get(s)?;
        (r.launches < self.policy.max_launches).then_some(r.next_at)
    }

    /// The session to launch an agent for now, if any; it counts as launched (in flight) from here on.
    pub fn due(&mut self, now: Instant) -> Option<String> {
        let at = self.next_check()?;
        if now < at {
            return None;
        }
        let s = self.served.clone()?;
        let launches = self.records.get(&s)?.launches + 1;
        let next_at = now + self.backoff(launches);
        let r = self.records.get_mut(&s)?;
        r.launches = launches;
        r.next_at = next_at;
        self.in_flight = Some(s.clone());
        Some(s)
    }

    /// The launch for `session` finished at `now`; `started`: the launcher reported the agent started (then the
    /// agent gets [`LaunchPolicy::settle`] to connect). The back-off applies either way.
    pub fn launch_done(&mut self, session: &str, started: bool, now: Instant) {
        if self.in_flight.as_deref() == Some(session) {
            self.in_flight = None;
        }
        if started {
            let settle = now + self.policy.settle;
            if let Some(r) = self.records.get_mut(session) {
                r.next_at = r.next_at.max(settle);
            }
        }
    }

    /// How many launches `session` has had.
    pub fn launches(&self, session: &str) -> u32 {
        self.records.get(session).map_or(0, |r| r.launches)
    }

    /// Whether `session` got its last launch (no more will be made).
    pub fn gave_up(&self, session: &str) -> bool {
        self.launches(session) >= self.policy.max_launches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn plan() -> (LaunchPlan, Instant) {
        (LaunchPlan::new(LaunchPolicy::default()), Instant::now())
    }

    #[test]
    fn launches_only_after_the_grace_period_without_an_agent() {
        let (mut p, t0) = plan();
        assert_eq!(p.due(t0), None, "nothing is served");
        p.set_served(Some("2"), t0);
        assert_eq!(p.next_check(), Some(t0 + 5 * S));
        assert_eq!(p.due(t0 + 4 * S), None);
        assert_eq!(p.due(t0 + 5 * S).as_deref(), Some("2"));
        assert_eq!(p.launches("2"), 1);
    }

    #[test]
    fn an_agent_within_the_grace_period_means_no_launch() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        p.agent_connected(1, "2");
        assert_eq!(p.next_check(), None);
        assert_eq!(p.due(t0 + 60 * S), None);
        assert_eq!(p.launches("2"), 0);
    }

    #[test]
    fn an_agent_of_another_session_does_not_count() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        p.agent_connected(1, "c1");
        assert_eq!(p.due(t0 + 5 * S).as_deref(), Some("2"));
    }

    #[test]
    fn never_twice_while_in_flight_nor_while_an_agent_is_connected() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        assert_eq!(p.due(t0 + 5 * S).as_deref(), Some("2"));
        // The launch is in flight: no second one, however long it takes.
        assert_eq!(p.next_check(), None);
        assert_eq!(p.due(t0 + 3600 * S), None);
        p.agent_connected(7, "2");
        p.launch_done("2", true, t0 + 6 * S);
        assert_eq!(p.due(t0 + 3600 * S), None, "the launched agent serves it");
        assert_eq!(p.launches("2"), 1);
    }

    #[test]
    fn not_served_sessions_get_nothing() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        p.set_served(None, t0 + S);
        assert_eq!(p.due(t0 + 60 * S), None);
        assert_eq!(p.launches("2"), 0);
    }

    #[test]
    fn a_session_switch_restarts_the_grace_period() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        p.set_served(Some("3"), t0 + 4 * S);
        assert_eq!(p.due(t0 + 5 * S), None, "session 2 is no longer served");
        assert_eq!(p.due(t0 + 9 * S).as_deref(), Some("3"));
        p.launch_done("3", false, t0 + 10 * S);
        // Back to 2 after a long time: its own grace period, from the switch.
        p.set_served(Some("2"), t0 + 100 * S);
        assert_eq!(p.due(t0 + 104 * S), None);
        assert_eq!(p.due(t0 + 105 * S).as_deref(), Some("2"));
    }

    #[test]
    fn failed_launches_back_off_doubling_then_give_up() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        let mut t = t0 + 5 * S;
        let mut waits = Vec::new();
        while let Some(s) = p.due(t) {
            p.launch_done(&s, false, t);
            let next = p.next_check();
            if let Some(n) = next {
                assert_eq!(p.due(n - S), None, "not before its back-off");
                waits.push((n - t).as_secs());
                t = n;
            } else {
                break;
            }
        }
        assert_eq!(waits, [30, 60, 120, 240]);
        assert_eq!(p.launches("2"), 5);
        assert!(p.gave_up("2"));
        assert_eq!(p.due(t + 10_000 * S), None);
    }

    #[test]
    fn an_agent_that_leaves_is_replaced_only_after_grace_and_back_off() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        assert_eq!(p.due(t0 + 5 * S).as_deref(), Some("2"));
        p.launch_done("2", false, t0 + 5 * S);
        p.agent_connected(1, "2");
        // The agent crashes at once: the back-off (30 s after the launch) still holds.
        p.agent_gone(1, t0 + 6 * S);
        assert_eq!(p.due(t0 + 34 * S), None);
        assert_eq!(p.due(t0 + 35 * S).as_deref(), Some("2"));
        p.launch_done("2", false, t0 + 35 * S);
        p.agent_connected(2, "2");
        // It leaves much later: only the grace period.
        p.agent_gone(2, t0 + 1000 * S);
        assert_eq!(p.due(t0 + 1004 * S), None);
        assert_eq!(p.due(t0 + 1005 * S).as_deref(), Some("2"));
    }

    #[test]
    fn a_started_agent_gets_time_to_connect() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        assert_eq!(p.due(t0 + 5 * S).as_deref(), Some("2"));
        // Started, but its agent is slow to connect: no second launch before the settle time.
        p.launch_done("2", true, t0 + 8 * S);
        assert_eq!(p.next_check(), Some(t0 + 128 * S));
        assert_eq!(p.due(t0 + 127 * S), None);
        assert_eq!(p.due(t0 + 128 * S).as_deref(), Some("2"));
    }

    #[test]
    fn an_unknown_agent_leaving_changes_nothing() {
        let (mut p, t0) = plan();
        p.set_served(Some("2"), t0);
        p.agent_connected(1, "2");
        p.agent_gone(99, t0 + S);
        assert_eq!(p.due(t0 + 60 * S), None);
    }

    #[test]
    fn records_stay_bounded() {
        let (mut p, t0) = plan();
        for i in 0..1000u32 {
            p.set_served(Some(&i.to_string()), t0 + i * S);
        }
        assert!(p.records.len() <= MAX_RECORDS + 1);
        assert!(p.records.contains_key("999"), "the served session is kept");
    }
}
