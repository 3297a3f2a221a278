//! Saving to a directory and resuming in a new desktop, as after a daemon restart.

use agentd_computer::{Action, ComputerProvider, Size};
use agentd_mock::{ACTIONS_FILE, MockDesktop, STATE_FILE, Scene};

use crate::support::*;

fn open(dir: &std::path::Path) -> MockDesktop {
    let scene = Scene::builtin("login").unwrap_or_else(|| panic!("login"));
    MockDesktop::open_persistent(scene, None, dir).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_reopened_desktop_resumes_where_it_was() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (state_before, actions_before, frame_before) = {
        let d = open(dir.path());
        click(&d, "username");
        type_text(&d, "alice");
        keys(&d, "Tab");
        type_text(&d, "hunt");
        d.perform(&Action::Move { x: 10, y: 20, keys: Vec::new() }).await.ok();
        (state(&d), d.actions(), d.frame())
    };
    assert_eq!(std::fs::read_to_string(dir.path().join(ACTIONS_FILE)).unwrap_or_default().lines().count(), 5);
    let d = open(dir.path());
    assert_eq!(state(&d), state_before);
    assert_eq!(d.actions(), actions_before);
    assert!(d.frame() == frame_before, "the same pixels after a restart");
    // And it goes on from there.
    type_text(&d, "er2\n");
    assert_eq!(state(&d).screen, "welcome");
    assert_eq!(state(&d).actions_received, 6);
    drop(d);
    let d = open(dir.path());
    assert_eq!(state(&d).screen, "welcome");
    assert_eq!(d.actions().len(), 6);
}

#[test]
fn actions_logged_after_the_last_snapshot_are_replayed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let expected = {
        let d = open(dir.path());
        click(&d, "username");
        type_text(&d, "alice\thunter2\n");
        state(&d)
    };
    // A process killed between appending to the log and writing the snapshot: no snapshot at all here.
    std::fs::remove_file(dir.path().join(STATE_FILE)).unwrap_or_else(|e| panic!("{e}"));
    let d = open(dir.path());
    assert_eq!(state(&d), expected);
    assert!(dir.path().join(STATE_FILE).exists(), "the snapshot is rewritten after a replay");
}

#[test]
fn a_directory_of_another_scene_or_size_is_refused() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    {
        let d = open(dir.path());
        type_text(&d, "x");
    }
    let form = Scene::builtin("form").unwrap_or_else(|| panic!("form"));
    let err = MockDesktop::open_persistent(form, None, dir.path()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("login"), "{err}");
    let login = Scene::builtin("login").unwrap_or_else(|| panic!("login"));
    assert!(MockDesktop::open_persistent(login, Some(Size::new(800, 600)), dir.path()).is_err());
}

#[test]
fn a_snapshot_one_action_behind_the_log_catches_up() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state_path = dir.path().join(STATE_FILE);
    let expected = {
        let d = open(dir.path());
        click(&d, "username");
        type_text(&d, "alice");
        let older = std::fs::read(&state_path).unwrap_or_default();
        keys(&d, "Tab");
        // Killed after the log append of the Tab but before its snapshot replaced the old one.
        std::fs::write(&state_path, older).unwrap_or_else(|e| panic!("{e}"));
        state(&d)
    };
    let d = open(dir.path());
    assert_eq!(state(&d), expected);
    assert_eq!(state(&d).focused.as_deref(), Some("password"));
    assert_eq!(d.actions().len(), 3);
}

#[tokio::test]
async fn a_snapshot_every_few_actions_and_the_log_tail_rebuild_the_desktop() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let snapshots = |dir: &std::path::Path| -> u64 {
        let text = std::fs::read_to_string(dir.join(STATE_FILE)).unwrap_or_default();
        let saved: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        saved["state"]["actions_received"].as_u64().unwrap_or(u64::MAX)
    };
    let (expected, frame) = {
        let d = open(dir.path());
        click(&d, "username");
        for i in 0..70 {
            d.perform(&Action::Move { x: 10 + i, y: 20, keys: Vec::new() }).await.ok();
        }
        type_text(&d, "a");
        (state(&d), d.frame())
    };
    // 72 actions: the snapshot is from the 64th; the last 8 come back from the log.
    assert_eq!(snapshots(dir.path()), 64);
    let d = open(dir.path());
    assert_eq!(state(&d), expected);
    assert!(d.frame() == frame);
    assert_eq!(snapshots(dir.path()), 72, "caught up on open");
}
