//! Random action sequences on every built-in scene and several sizes: nothing panics, every frame has the
//! screen's size, and the cached frame always equals a fresh render.

use agentd_computer::{Action, MouseButton, Point, Size};
use agentd_mock::Scene;

use crate::support::sized;

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn point(&mut self, size: Size) -> Point {
        Point::new(self.below(size.width as u64) as i32, self.below(size.height as u64) as i32)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const KEYS: &[&str] = &[
    "Return",
    "Tab",
    "ISO_Left_Tab",
    "BackSpace",
    "Delete",
    "Left",
    "Right",
    "Up",
    "Down",
    "Home",
    "End",
    "Page_Up",
    "Page_Down",
    "Escape",
    "space",
    "a",
    "c",
    "v",
    "x",
    "F4",
    "KP_Enter",
    "KP_Down",
    "1",
];
const MODS: &[&str] = &["ctrl", "shift", "alt", "super"];
const TEXTS: &[&str] = &["alice", "hunter2", " ", "\n", "\t", "é€✓", "\u{8}", "g", "u", "@"];

fn random_action(rng: &mut Rng, size: Size) -> Action {
    let p = rng.point(size);
    match rng.below(12) {
        0..=2 => {
            let button = if rng.below(6) == 0 { MouseButton::Right } else { MouseButton::Left };
            let keys = if rng.below(8) == 0 { vec![rng.pick(MODS).to_string()] } else { vec![] };
            Action::Click { x: p.x, y: p.y, button, keys }
        }
        3 => Action::DoubleClick { x: p.x, y: p.y },
        4 => Action::TripleClick { x: p.x, y: p.y },
        5 => {
            if rng.below(2) == 0 {
                Action::MouseDown { button: MouseButton::Left, keys: Vec::new() }
            } else {
                Action::MouseUp { button: MouseButton::Left }
            }
        }
        6 => Action::Move { x: p.x, y: p.y, keys: Vec::new() },
        7 => {
            let n = 2 + rng.below(4) as usize;
            Action::Drag {
                path: (0..n).map(|_| rng.point(size)).collect(),
                button: Default::default(),
                keys: Vec::new(),
            }
        }
        8 => Action::Scroll { x: p.x, y: p.y, scroll_x: 0, scroll_y: rng.below(800) as i32 - 400, keys: Vec::new() },
        9 => Action::Type { text: rng.pick(TEXTS).to_string() },
        _ => {
            let mut keys = Vec::new();
            if rng.below(3) == 0 {
                keys.push(rng.pick(MODS).to_string());
            }
            keys.push(rng.pick(KEYS).to_string());
            Action::Keypress { keys }
        }
    }
}

#[test]
fn random_actions_never_break_the_desktop() {
    for (seed, size) in [(1u64, Size::new(1280, 800)), (2, Size::new(640, 480)), (3, Size::new(1920, 1080))] {
        for name in Scene::builtin_names() {
            let d = sized(name, Some(size));
            let mut rng = Rng(seed * 7919 + name.len() as u64);
            for step in 0..600 {
                let action = random_action(&mut rng, size);
                if let Err(e) = d.apply(&action) {
                    panic!("{name} at {size}, step {step}, {}: {e}", action.summary());
                }
                if step % 50 == 49 {
                    let frame = d.frame();
                    assert_eq!(frame.size(), size);
                    assert!(frame == d.render_uncached(), "{name} at {size}, step {step}: stale cache");
                }
            }
            assert_eq!(d.mock_state().actions_received, 600);
        }
    }
}
