//! Pixels: text is really drawn, frames follow state, every size renders.

use agentd_computer::{Action, ComputerProvider, Point, Size};
use agentd_mock::{MockDesktop, Scene};

use crate::support::*;

fn distinct_colours(frame: &agentd_computer::Frame) -> usize {
    let mut seen = std::collections::HashSet::new();
    for px in frame.as_rgb().chunks_exact(3) {
        seen.insert([px[0], px[1], px[2]]);
    }
    seen.len()
}

#[test]
fn labels_are_real_anti_aliased_text() {
    let d = desktop("login");
    let (p, size) = d.widget_bounds("sign_in").unwrap_or_else(|| panic!("sign_in not visible"));
    let button = d.frame().crop(p, size);
    assert!(!button.is_uniform());
    // Anti-aliasing leaves many intermediate shades between the text and the button colour.
    assert!(distinct_colours(&button) > 10, "{} colours", distinct_colours(&button));
    // The sticky note's text is on screen: dark pixels inside the note's area (top right).
    let frame = d.frame();
    let note = frame.crop(Point::new(1280 - 16 - 250, 16), Size::new(250, 80));
    let dark = note.as_rgb().chunks_exact(3).filter(|px| px[0] < 90 && px[1] < 90).count();
    assert!(dark > 200, "only {dark} dark pixels in the note");
}

#[test]
fn typing_changes_the_pixels_of_the_field_only_nearby() {
    let d = desktop("login");
    click(&d, "username");
    let (p, size) = d.widget_bounds("username").unwrap_or_else(|| panic!("username not visible"));
    let before = d.frame();
    type_text(&d, "alice");
    let after = d.frame();
    let changed_inside = after.crop(p, size).changed_pixels(&before.crop(p, size));
    assert!(changed_inside > 100, "{changed_inside}");
    // Outside the field nothing moved except the field itself.
    let total = after.changed_pixels(&before);
    assert_eq!(total, changed_inside);
}

#[test]
fn screens_look_different_and_unchanged_screens_are_stable() {
    let d = desktop("login");
    let login = d.frame();
    assert!(login == d.frame());
    click(&d, "username");
    type_text(&d, "alice\thunter2\n");
    let welcome = d.frame();
    assert!(welcome.changed_pixels(&login) > 20_000);
}

#[tokio::test]
async fn every_builtin_renders_at_every_size() {
    let sizes = [
        Size::new(320, 240),
        Size::new(640, 480),
        Size::new(800, 600),
        Size::new(1024, 768),
        Size::new(1280, 800),
        Size::new(1366, 768),
        Size::new(1920, 1080),
        Size::new(2560, 1440),
        Size::new(500, 1200),
    ];
    for name in Scene::builtin_names() {
        for size in sizes {
            let d = sized(name, Some(size));
            let frame = d.screenshot().await.unwrap_or_else(|e| panic!("{name} {size}: {e}"));
            assert_eq!(frame.size(), size);
            assert!(!frame.is_uniform(), "{name} at {size}");
            // Poke at every corner and the middle; nothing may panic.
            let (w, h) = (size.width as i32, size.height as i32);
            for (x, y) in [(0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1), (w / 2, h / 2)] {
                let _ = d.apply(&Action::DoubleClick { x, y });
                let _ = d.apply(&Action::Scroll { x, y, scroll_x: 0, scroll_y: 300, keys: Vec::new() });
                let _ = d.apply(&Action::Type { text: "x\t".into() });
            }
            assert_eq!(d.frame().size(), size);
        }
    }
}

#[test]
fn the_login_flow_works_at_640x480_and_1920x1080() {
    for size in [Size::new(640, 480), Size::new(1920, 1080)] {
        let d = sized("login", Some(size));
        click(&d, "username");
        type_text(&d, "alice\thunter2\n");
        assert_eq!(state(&d).screen, "welcome", "at {size}");
        assert_eq!(state(&d).size, size);
    }
}

#[test]
fn sizes_out_of_range_are_refused() {
    let scene = || Scene::builtin("blank").unwrap_or_else(|| panic!("blank"));
    assert!(MockDesktop::new(scene(), Some(Size::new(0, 0))).is_err());
    assert!(MockDesktop::new(scene(), Some(Size::new(100_000, 600))).is_err());
    let default = MockDesktop::new(scene(), None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(default.size(), Size::new(1280, 800));
}

#[test]
fn the_pointer_is_drawn_where_it_is() {
    let d = desktop("blank");
    act(&d, Action::Move { x: 100, y: 100, keys: Vec::new() });
    let frame = d.frame();
    assert_eq!(frame.pixel(Point::new(100, 100)), Some([0, 0, 0]), "the arrow's tip");
    assert_eq!(frame.pixel(Point::new(101, 103)), Some([255, 255, 255]), "the arrow's fill");
    act(&d, Action::Move { x: 300, y: 100, keys: Vec::new() });
    assert_ne!(d.frame().pixel(Point::new(100, 100)), Some([0, 0, 0]));
}
